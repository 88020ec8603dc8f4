// siesta's page: a chat that streams from POST /v1/chat/completions and keeps this tab's
// conversation by its prompt_cache_key, and a live view of /v1/status (read-only: it never
// wakes a conversation). With --api-key, the key is asked for and kept in this tab's memory
// only (never in storage). Everything is same-origin.
"use strict";

const state = {
  apiKey: "",
  key: newKey(),   // this tab's conversation, by prompt_cache_key
  messages: [],
  sending: false,
};

function newKey() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return "page-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

function headers(json) {
  const h = {};
  if (json) h["Content-Type"] = "application/json";
  if (state.apiKey) h["Authorization"] = "Bearer " + state.apiKey;
  return h;
}

// A 401 shows the key form; the caller's work stops there.
function needsKey(response) {
  if (response.status !== 401) return false;
  document.getElementById("key-form").hidden = false;
  return true;
}

function bytes(n) {
  if (!n) return "0";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.textContent = text;
  const box = document.getElementById("messages");
  box.appendChild(div);
  box.scrollTop = box.scrollHeight;
  return div;
}

async function send(text) {
  state.messages.push({ role: "user", content: text });
  addMessage("user", text);
  const answer = addMessage("assistant", "");
  answer.id = "answer";
  document.querySelectorAll(".msg.assistant").forEach((m) => { if (m !== answer) m.removeAttribute("id"); });
  const usage = document.getElementById("usage");
  usage.textContent = "";
  usage.dataset.cached = "";
  const response = await fetch("/v1/chat/completions", {
    method: "POST",
    headers: headers(true),
    body: JSON.stringify({ messages: state.messages, stream: true, max_tokens: 48,
                           stream_options: { include_usage: true },
                           prompt_cache_key: state.key }),
  });
  if (needsKey(response) || !response.ok) {
    answer.className = "msg error";
    answer.textContent = response.status === 401 ? "the server needs its API key"
                                                 : "error " + response.status + ": " + await response.text();
    state.messages.pop();
    return;
  }
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let pending = "", said = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    pending += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = pending.indexOf("\n\n")) >= 0) {
      const event = pending.slice(0, cut);
      pending = pending.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const chunk = JSON.parse(line.slice(6));
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
        if (delta && delta.content) { said += delta.content; answer.textContent = said; }
        if (chunk.usage) {
          const cached = (chunk.usage.prompt_tokens_details || {}).cached_tokens || 0;
          usage.dataset.cached = String(cached);
          usage.textContent = cached + " of " + chunk.usage.prompt_tokens +
                              " prompt tokens reused from this conversation's history";
        }
      }
    }
  }
  state.messages.push({ role: "assistant", content: said });
  answer.dataset.done = "1";
}

// One bar of the totals, built as elements (the page's policy allows no inline style).
function bar(label, used, total) {
  const share = total > 0 ? Math.min(100, (100 * used) / total) : 0;
  const div = document.createElement("div");
  div.className = "bar";
  const caption = document.createElement("div");
  caption.className = "label";
  const name = document.createElement("span");
  name.textContent = label;
  const amount = document.createElement("span");
  amount.textContent = bytes(used) + " of " + bytes(total);
  caption.append(name, amount);
  const track = document.createElement("div");
  track.className = "track";
  const fill = document.createElement("div");
  fill.className = "fill";
  fill.style.width = share.toFixed(1) + "%";
  track.appendChild(fill);
  div.append(caption, track);
  return div;
}

function row(s) {
  const tr = document.createElement("tr");
  tr.dataset.id = s.id;
  tr.dataset.state = s.state;
  const cells = [s.id, null, s.tokens, bytes(s.ram_bytes), bytes(s.disk_bytes),
                 (s.seconds_idle || 0).toFixed(0) + " s", s.restores,
                 s.operation_ms ? s.operation_ms.toFixed(1) + " ms" : "", s.fallbacks];
  cells.forEach((value, i) => {
    const td = document.createElement("td");
    if (i === 1) {
      const tag = document.createElement("span");
      tag.className = "state " + s.state;
      tag.textContent = s.state;
      td.appendChild(tag);
    } else {
      td.textContent = value;
    }
    tr.appendChild(td);
  });
  return tr;
}

async function refresh() {
  let body;
  try {
    const response = await fetch("/v1/status", { headers: headers(false) });
    if (needsKey(response) || !response.ok) return;
    body = await response.json();
  } catch (e) {
    document.getElementById("server-state").textContent = "server unreachable";
    return;
  }
  document.getElementById("server-state").textContent = "";
  document.getElementById("model").textContent = body.model.name + ", context " + body.model.context;
  const cache = body.cache;
  // Held: committed device memory. Released: address space the sessions keep reserved while
  // their pages are gone (what an offload gives back, at the same addresses).
  const backend = body.backend;
  const released = Math.max(0, backend.reserved_bytes - backend.committed_bytes);
  const bars = [bar("device memory held", backend.committed_bytes, backend.device_total_bytes),
                bar("released, addresses kept", released, backend.reserved_bytes)];
  if (cache.ram_tier) bars.push(bar("RAM tier", cache.ram_tier.used_bytes, cache.ram_tier.budget_bytes));
  if (cache.disk_tier) bars.push(bar("disk budget", cache.disk_tier.used_bytes, cache.disk_tier.budget_bytes));
  document.getElementById("bars").replaceChildren(...bars);
  const sessions = cache.sessions || [{ id: 0, state: cache.state, tokens: cache.tokens,
    ram_bytes: cache.ram_bytes, disk_bytes: cache.disk_bytes, seconds_idle: 0,
    restores: cache.counters.restores, operation_ms: cache.operation_ms,
    fallbacks: Object.values(cache.counters.fallbacks).reduce((a, b) => a + b, 0) }];
  const tbody = document.querySelector("#conversations tbody");
  tbody.replaceChildren(...sessions.map(row));
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("chat-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const box = document.getElementById("message");
    const text = box.value.trim();
    if (!text || state.sending) return;
    box.value = "";
    state.sending = true;
    document.getElementById("send").disabled = true;
    try { await send(text); } finally {
      state.sending = false;
      document.getElementById("send").disabled = false;
    }
  });
  document.getElementById("new-chat").addEventListener("click", () => {
    state.key = newKey();
    state.messages = [];
    document.getElementById("messages").replaceChildren();
    document.getElementById("usage").textContent = "";
  });
  document.getElementById("offload").addEventListener("click", async () => {
    const response = await fetch("/v1/cache/offload", { method: "POST", headers: headers(false) });
    if (needsKey(response)) return;
    const out = document.getElementById("offload-result");
    out.textContent = response.ok ? "state: " + (await response.json()).state
                                  : "refused: " + response.status;
    refresh();
  });
  document.getElementById("key-form").addEventListener("submit", (event) => {
    event.preventDefault();
    state.apiKey = document.getElementById("api-key").value;
    document.getElementById("key-form").hidden = true;
    refresh();
  });
  refresh();
  setInterval(refresh, 1000);
});
