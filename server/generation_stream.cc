#include "server/generation_stream.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <utility>

#include "server/connection_probe.h"

namespace siesta::server {
namespace {

using std::chrono::milliseconds;

// How often a waiting handler looks at its client's socket and its generation.
constexpr milliseconds kPollInterval{10};

// Shared by the handler, the engine thread (on_text) and the content provider, which may
// outlive the handler's frame.
struct Generation {
  std::shared_ptr<std::atomic<bool>> cancel;
  std::future<Result<engine::GenerateResult>> future;
  std::optional<Result<engine::GenerateResult>> result;  // once taken from the future
  // The request's client (connection_probe.h), valid while the request is served: in the
  // handler and in the content provider, which cpp-httplib runs before the request ends.
  ClientWatch* client = nullptr;

  std::mutex mutex;
  std::condition_variable arrived;
  std::deque<std::string> pieces;  // guarded by mutex

  bool done() {
    if (result) return true;
    if (future.wait_for(milliseconds(0)) != std::future_status::ready) return false;
    result.emplace(future.get());
    return true;
  }
  // Cancels, then waits for the engine to finish with this request.
  void abandon() {
    cancel->store(true);
    if (!result) result.emplace(future.get());
  }
  bool has_piece() {
    std::lock_guard<std::mutex> lock(mutex);
    return !pieces.empty();
  }
  // Without a watch (a plain httplib::Server in a test) only a failed write reveals it.
  bool client_gone() const { return client != nullptr && client->gone(); }
};

std::shared_ptr<Generation> start(ServerApp& app, engine::GenerateRequest request, bool stream) {
  auto generation = std::make_shared<Generation>();
  generation->cancel = app.new_request_token();
  generation->client = current_client();
  request.cancel = generation->cancel;
  if (stream) {
    // A weak reference: the engine's copy of the request must not keep the state alive in a
    // cycle (state -> future -> engine command -> on_text -> state).
    std::weak_ptr<Generation> weak = generation;
    request.on_text = [weak, own = std::move(request.on_text)](std::string_view text) {
      if (own) own(text);  // the API's own (llama_routes.cc times the first piece)
      if (auto state = weak.lock()) {
        std::lock_guard<std::mutex> lock(state->mutex);
        state->pieces.emplace_back(text);
        state->arrived.notify_one();
      }
    };
  }
  generation->future = app.engine().generate(std::move(request));
  return generation;
}

// What a stream has sent so far.
struct StreamState {
  bool begun = false;  // reply.begin's events
  bool pieces_sent = false;
};

// Streams the pieces as they come; called by httplib until it returns false or done() is
// called. Returns false (and the caller cancels) when the client is gone.
bool provide(Generation& g, const GenerationReply& reply, StreamState& state,
             httplib::DataSink& sink) {
  std::string out;
  if (!state.begun) {
    state.begun = true;
    if (reply.begin) out += reply.begin();
  }
  std::deque<std::string> pieces;
  {
    std::unique_lock<std::mutex> lock(g.mutex);
    // The result is made ready after the last piece is queued: once done, no wait is needed.
    if (g.pieces.empty() && !g.done()) {
      g.arrived.wait_for(lock, kPollInterval, [&] { return !g.pieces.empty(); });
    }
    pieces.swap(g.pieces);
  }
  const bool finished = pieces.empty() && g.done();
  for (const std::string& piece : pieces) {
    out += reply.piece(piece, !state.pieces_sent);
    state.pieces_sent = true;
  }
  if (!finished) {
    // Pieces may still be queued when the result is ready: finish on the next call, after
    // they are written.
    if (!out.empty() && !sink.write(out.data(), out.size())) return false;
    return !g.client_gone();
  }
  const Result<engine::GenerateResult>& result = *g.result;
  if (!result.ok()) {
    out += reply.error(api_error_from_status(result.status()));
  } else if (result->finish == engine::FinishReason::kCancelled) {
    out += reply.error(shutting_down());
  } else {
    out += reply.finish(*result, state.pieces_sent);
  }
  if (!sink.write(out.data(), out.size())) return false;
  sink.done();
  return true;
}

}  // namespace

ApiError shutting_down() {
  ApiError error;
  error.http_status = 503;
  error.message = "the generation was cancelled: the server is shutting down";
  error.code = "cancelled";
  return error;
}

void serve_generation(ServerApp& app, engine::GenerateRequest request, bool stream,
                      const GenerationReply& reply, httplib::Response& response) {
  std::shared_ptr<Generation> g = start(app, std::move(request), stream);

  // Wait for the result (or, streaming, the first piece), watching the client.
  while (!(stream && g->has_piece()) &&
         g->future.wait_for(kPollInterval) != std::future_status::ready) {
    if (g->client_gone()) {
      app.note_client_gone();
      g->abandon();
      response.status = 499;  // nginx's "client closed request": nobody reads it
      return;
    }
  }
  if (!stream || !g->has_piece()) {
    g->done();
    const Result<engine::GenerateResult>& result = *g->result;
    if (!result.ok()) return reply.fail(response, api_error_from_status(result.status()));
    if (result->finish == engine::FinishReason::kCancelled) {
      return reply.fail(response, shutting_down());
    }
  }
  if (!stream) return reply.complete(response, g->result->value());

  response.set_header("Cache-Control", "no-cache");
  auto state = std::make_shared<StreamState>();
  response.set_chunked_content_provider(
      reply.stream_content_type,
      [&app, g, reply, state](size_t, httplib::DataSink& sink) {
        if (provide(*g, reply, *state, sink)) return true;
        app.note_client_gone();
        g->cancel->store(true);
        return false;
      },
      // Runs when httplib is done with the response, whatever happened: a stream that did not
      // finish cancels its generation, and the connection's thread waits for the engine.
      [g](bool success) {
        if (!success || !g->done()) g->abandon();
      });
}

}  // namespace siesta::server
