#!/usr/bin/env bash
# The 30,000-token prompt into synthetic:small --ctx 32768 through siesta-server, timed.
set -euo pipefail
BIN=${1:-/work/main/build/release/server/siesta-server}
PORT=18777
$BIN --model synthetic:small --ctx 32768 --port $PORT > /tmp/p30k-server.log 2>&1 &
SRV=$!
trap 'kill $SRV 2>/dev/null || true' EXIT
for i in $(seq 1 100); do curl -sf http://127.0.0.1:$PORT/health >/dev/null && break; sleep 0.2; done
python3 - <<'PY' > /tmp/p30k-body.json
import json, random
random.seed(7)
words = ["the","rain","in","spain","stays","mainly","on","plain","and","a","cat","sat"]
text = ""
while len(text) < 30000:
    text += random.choice(words) + " "
print(json.dumps({"model": "synthetic:small", "prompt": text[:30000], "max_tokens": 1}))
PY
echo "load average before: $(cat /proc/loadavg)"
start=$(date +%s.%N)
curl -s -m 600 -H 'Content-Type: application/json' --data @/tmp/p30k-body.json http://127.0.0.1:$PORT/v1/completions > /tmp/p30k-answer.json
end=$(date +%s.%N)
echo "seconds: $(echo "$end - $start" | bc)"
echo "load average after: $(cat /proc/loadavg)"
python3 -c "import json;d=json.load(open('/tmp/p30k-answer.json'));print('usage', d.get('usage'))"
