# Unit tests: one binary per layer. Whatever runs on the simulator runs its worker thread (the
# simulated device stream), and those files, with the ones where threads meet on purpose,
# carry `concurrency` too: the ThreadSanitizer preset runs them.

# core/base: Status/Result, clocks, log text, the POSIX file system, the executor.
siesta_test_binary(base_tests LABELS unit)
siesta_test_sources(base_tests LABELS unit SOURCES
  unit/status_test.cc unit/clock_test.cc unit/log_text_test.cc unit/posix_file_system_test.cc)
siesta_test_sources(base_tests LABELS unit concurrency SOURCES unit/executor_test.cc)
# The kept thread pool the snapshot pipelines share.
siesta_test_sources(base_tests LABELS unit concurrency SOURCES unit/thread_pool_test.cc)
# A range read once, in order, around the page cache, by loader threads ahead of its readers;
# a failing read around the cache (injected) is read through it instead.
siesta_test_sources(base_tests LABELS unit concurrency fault_injection SOURCES
  unit/read_ahead_file_test.cc)
# The file system's and the private directory rule's failures, each with its typed code, and
# the wrappers that forward what they do not change.
siesta_test_sources(base_tests LABELS unit SOURCES
  unit/posix_file_system_errors_test.cc unit/private_directory_faults_test.cc
  unit/file_system_wrapper_test.cc)
# The system calls no real condition makes fail (fstat, fcntl, fdatasync, close, ...) or that
# a signal interrupts: this file interposes the libc functions and fails them on demand.
siesta_test_sources(base_tests LABELS unit SOURCES unit/posix_file_system_call_faults_test.cc)
siesta_finish_test_binary(base_tests)

# core/memory and the simulator: the staging ring, the range ledger, HostVmm, the SimBackend
# and the MemoryBackend conformance suite on it (bare and behind a transparent FaultyBackend).
siesta_test_binary(memory_tests LABELS unit LIBS siesta_backend_sim)
siesta_test_sources(memory_tests LABELS unit SOURCES unit/registered_host_memory_test.cc
  unit/staging_ring_test.cc unit/range_ledger_test.cc unit/host_vmm_test.cc)
siesta_test_sources(memory_tests LABELS unit concurrency SOURCES
  unit/sim_backend_test.cc unit/sim_backend_conformance_test.cc)
# Host address space at its limits, device copies whose waits fail, and the forwarding base
# of the MemoryBackend wrappers.
siesta_test_sources(memory_tests LABELS unit concurrency SOURCES
  unit/host_memory_limits_test.cc unit/device_copy_faults_test.cc
  unit/memory_backend_wrapper_test.cc)
siesta_finish_test_binary(memory_tests)

# core/snapshot: the format, the sealers, files written and read (serially and on the chunk
# pipeline's threads), exports, expiry, the store and the record buffers.
siesta_test_binary(snapshot_tests LABELS unit LIBS siesta_backend_sim)
# The chunk pipeline on a shared pool: ordered results, one sealer per running job, and a
# destructor that waits for its own jobs only.
siesta_test_sources(snapshot_tests LABELS unit concurrency SOURCES unit/chunk_pipeline_test.cc)
# Eight restores at once on the shared threads; a failing read fails its own alone.
siesta_test_sources(snapshot_tests LABELS unit concurrency fault_injection SOURCES
  unit/snapshot_shared_pool_test.cc)
siesta_test_sources(snapshot_tests LABELS unit SOURCES
  unit/snapshot_format_test.cc unit/chunk_sealer_test.cc unit/record_buffer_pool_test.cc
  unit/snapshot_export_test.cc unit/snapshot_expiry_test.cc unit/snapshot_store_test.cc)
# Adoption: a dead owner's chains offered under its lock, renamed, the rest removed; a rename
# that fails part-way (injected).
siesta_test_sources(snapshot_tests LABELS unit fault_injection SOURCES
  unit/snapshot_store_adoption_test.cc)
siesta_test_sources(snapshot_tests LABELS unit concurrency SOURCES
  unit/snapshot_round_trip_test.cc unit/snapshot_refusal_test.cc unit/snapshot_adoption_read_test.cc
  unit/snapshot_write_protocol_test.cc unit/snapshot_parallel_test.cc)
# The known-answer test re-encodes the documented format with OpenSSL of its own.
siesta_test_sources(snapshot_tests LABELS unit SOURCES unit/snapshot_known_answer_test.cc)
if(TARGET snapshot_tests)
  target_link_libraries(snapshot_tests PRIVATE OpenSSL::Crypto)
endif()
# The store's clean-up when listing, removing or syncing fails under it.
siesta_test_sources(snapshot_tests LABELS unit SOURCES unit/snapshot_store_cleanup_faults_test.cc)
# A caller's mistakes and failures no fault plan reaches (sizes, missing memory or backend, a
# free-space query or a size that fails), each a typed error that writes nothing.
siesta_test_sources(snapshot_tests LABELS unit concurrency SOURCES
  unit/snapshot_misuse_test.cc unit/snapshot_device_faults_test.cc)
# The store's naming: only names it makes are ever touched.
siesta_test_sources(snapshot_tests LABELS unit SOURCES unit/snapshot_store_names_test.cc)
# A snapshot file out of the page cache, read around it (a failing read around it, injected,
# is read through it), and the way chosen from the reads themselves.
siesta_test_sources(snapshot_tests LABELS unit concurrency fault_injection SOURCES
  unit/snapshot_cold_read_test.cc unit/cold_read_choice_test.cc)
# The snapshot key file: made once, refused unless private and whole; racing makers agree.
siesta_test_sources(snapshot_tests LABELS unit concurrency SOURCES unit/key_file_test.cc)
# OpenSSL calls that fail (no working library does): this binary interposes the functions the
# sealers call (tests/support/openssl_call_faults.cc), and these files fail them one by one.
siesta_test_sources(snapshot_tests LABELS unit SOURCES
  unit/chunk_sealer_openssl_faults_test.cc unit/snapshot_openssl_faults_test.cc)
if(TARGET snapshot_tests)
  target_sources(snapshot_tests PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/support/openssl_call_faults.cc)
endif()
siesta_finish_test_binary(snapshot_tests)

# core/offload: the settings' rules, the state table walked pair by pair against the one
# docs/ARCHITECTURE.md documents, every transition of the Offloader (ManualClock and
# ManualExecutor, a FakeOffloadTarget: no model needed) and its races with real threads.
siesta_test_binary(offload_tests LABELS unit LIBS siesta_backend_sim)
siesta_test_sources(offload_tests LABELS unit SOURCES
  unit/offload_config_test.cc unit/offload_machine_test.cc unit/save_outcome_test.cc
  unit/offload_totals_test.cc
  unit/offloader_test.cc unit/offloader_cold_restore_test.cc)
siesta_test_sources(offload_tests LABELS unit concurrency SOURCES unit/offloader_race_test.cc)
if(TARGET offload_tests)
  # The state table test reads the one docs/ARCHITECTURE.md documents.
  target_compile_definitions(offload_tests PRIVATE SIESTA_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
endif()
# What the transition tests leave out: the save's synchronize() (a job still queued on the
# simulator's work stream), a restore that runs out of memory half way through its commits,
# the retries (save backoff, an expired snapshot's deletion, a retired file's unlink) and the
# rarer error paths (a host range that will not release, a discard that fails, another format
# version, a failed retire).
siesta_test_sources(offload_tests LABELS unit concurrency SOURCES unit/offloader_save_sync_test.cc)
siesta_test_sources(offload_tests LABELS unit concurrency SOURCES
  unit/offloader_save_ahead_race_test.cc)
siesta_test_sources(offload_tests LABELS unit SOURCES
  unit/offloader_restore_rollback_test.cc unit/offloader_retry_test.cc
  unit/offloader_error_paths_test.cc unit/offloader_setup_test.cc
  unit/offloader_save_ahead_test.cc unit/offloader_release_count_test.cc)
siesta_test_sources(offload_tests LABELS unit concurrency SOURCES unit/offloader_delta_test.cc)
# The RAM tier: its budget and blocks (threads sharing it), a session's regions copied into it
# and back, and the Offloader keeping snapshots there (to disk when the tier has no room).
siesta_test_sources(offload_tests LABELS unit concurrency SOURCES unit/ram_tier_test.cc)
siesta_test_sources(offload_tests LABELS unit SOURCES unit/ram_tier_memory_test.cc)
siesta_test_sources(offload_tests LABELS unit fault_injection SOURCES unit/offloader_ram_test.cc)
# The tier's spill: the least recently used copies go to disk to make room; a spill that fails
# keeps its copy; a command for the spilled session (or for the one that asked for the room)
# stops it.
siesta_test_sources(offload_tests LABELS unit fault_injection concurrency SOURCES
  unit/offloader_spill_test.cc)
# Delta saves in the tier: a restored copy stays as the base of the next save, which copies
# only what changed; the base is the first room taken; a copy with deltas spills as a chain.
siesta_test_sources(offload_tests LABELS unit concurrency SOURCES
  unit/offloader_ram_delta_test.cc)
# The snapshot directory's budget: files reserved before they are written, the least recently
# used released conversation's snapshot deleted for room, a failed deletion kept counted.
siesta_test_sources(offload_tests LABELS unit fault_injection concurrency SOURCES
  unit/offloader_disk_budget_test.cc)
# Adoption after a restart: a fresh session takes an earlier process's chain, disk at once.
siesta_test_sources(offload_tests LABELS unit SOURCES unit/offloader_adoption_test.cc)
# The tier's pinned pool: chunks prepared ahead by its own thread, blocks carved from them,
# chunks given back by its rule, a refused registration.
siesta_test_sources(offload_tests LABELS unit fault_injection concurrency SOURCES
  unit/pinned_ram_pool_test.cc)
siesta_finish_test_binary(offload_tests)

# compute: the contract's number formats (KvType names, f16, int8, its exp), and HostKernels
# against tests/support/reference_kernels.h, with graph capture and replay across a decommit,
# and its block operations against its single-token ones (any thread count).
siesta_test_binary(kernel_tests LABELS unit LIBS siesta_backend_sim)
siesta_test_sources(kernel_tests LABELS unit SOURCES unit/kernel_numerics_test.cc)
siesta_test_sources(kernel_tests LABELS unit concurrency SOURCES
  unit/host_kernels_test.cc unit/host_kernel_graph_test.cc unit/host_block_kernels_test.cc)
siesta_finish_test_binary(kernel_tests)

# engine/ and runtime/ (its assembly, on which the engine tests' rigs stand): model, tokenizer,
# session, sampler, stop strings, the command loop, exports, the engine's offload, a hostile
# snapshot directory under a sleeping session (a replayed older snapshot, a FIFO or a directory
# in the snapshot's place), and the EngineStack.
siesta_test_binary(engine_tests LABELS unit LIBS siesta_runtime)
siesta_test_sources(engine_tests LABELS unit SOURCES
  unit/model_config_test.cc unit/tokenizer_test.cc unit/session_test.cc
  unit/session_memory_test.cc unit/session_prompt_end_test.cc unit/model_test.cc
  unit/stop_matcher_test.cc unit/sampler_test.cc
  unit/engine_test.cc unit/engine_export_test.cc unit/engine_offload_test.cc
  unit/snapshot_replay_test.cc unit/snapshot_ownership_test.cc unit/prefill_pacer_test.cc)
siesta_test_sources(engine_tests LABELS unit concurrency SOURCES
  unit/engine_concurrency_test.cc unit/engine_prefill_cancel_test.cc unit/engine_stack_test.cc)
siesta_test_sources(engine_tests LABELS unit fault_injection SOURCES unit/engine_fault_test.cc)
# A Session whose kernels fail at each call of its creation and of a turn, and one whose host
# memory is released.
siesta_test_sources(engine_tests LABELS unit fault_injection SOURCES
  unit/session_kernel_faults_test.cc)
# Export and import wait for device work queued before them (a job on the simulator's work
# stream, queued from the test's thread); constants re-initialised after a fallback, an
# expiry and a restore.
siesta_test_sources(engine_tests LABELS unit concurrency SOURCES unit/engine_device_order_test.cc)
siesta_test_sources(engine_tests LABELS unit SOURCES unit/engine_reinit_test.cc)
# What a delta save of a Session reads (snapshot_regions_after) restored over its base, and the
# mark a save waits on (a fence that fails leaves none; a job queued from the test's thread).
siesta_test_sources(engine_tests LABELS unit SOURCES unit/session_delta_test.cc)
siesta_test_sources(engine_tests LABELS unit concurrency SOURCES unit/session_device_mark_test.cc)
# Several conversations: the session table's routing rules (pure), and the engine keeping N
# conversations over P committed sessions (eviction, restore, forgetting, the wait queue).
siesta_test_sources(engine_tests LABELS unit SOURCES unit/session_table_test.cc)
siesta_test_sources(engine_tests LABELS unit SOURCES unit/conversation_route_test.cc)
# Persistence: the route each snapshot carries (its number, history, key HMAC), read back from
# the file, and a restart finding a conversation by its key.
siesta_test_sources(engine_tests LABELS unit SOURCES unit/engine_persist_test.cc)
siesta_test_sources(engine_tests LABELS unit concurrency SOURCES
  unit/engine_sessions_test.cc unit/engine_sessions_race_test.cc unit/engine_interleave_test.cc)
# Forgetting a conversation by its route (the Responses API's DELETE): the table's part and the
# engine's, resident, offloaded, written ahead, and behind a running command.
siesta_test_sources(engine_tests LABELS unit concurrency SOURCES unit/engine_forget_test.cc)
siesta_finish_test_binary(engine_tests)

# server/: flags, status and metrics bodies, the snapshot directory, the OpenAI request and
# response bodies, the chat template, API keys, errors, request framing and the request policy
# (pure functions); the app, the HTTP server, its worker pool, the signal thread and the routes
# over loopback HTTP in process (threads meet there).
if(TARGET siesta_server_lib)
  siesta_test_binary(server_tests LABELS unit LIBS siesta_server_lib
    PCH <nlohmann/json.hpp> <httplib.h>)
  siesta_test_sources(server_tests LABELS unit SOURCES
    unit/server_flags_test.cc unit/status_json_test.cc unit/metrics_text_test.cc
    unit/cache_dir_test.cc unit/openai_json_test.cc unit/served_model_test.cc unit/anthropic_json_test.cc unit/json_fields_test.cc unit/chat_template_test.cc unit/auth_test.cc
    unit/api_error_test.cc unit/slot_error_test.cc unit/request_head_test.cc
    unit/request_policy_test.cc)
  siesta_test_sources(server_tests LABELS unit concurrency SOURCES
    unit/server_app_test.cc unit/http_server_test.cc unit/stop_signals_test.cc
    unit/api_routes_test.cc unit/worker_pool_test.cc)
  # llama-server's native POST /completion: its request fields and answers (pure functions).
  siesta_test_sources(server_tests LABELS unit SOURCES unit/llama_json_test.cc)
  # The connection loop alone: the idle deadline after every answer, max_requests exactly.
  siesta_test_sources(server_tests LABELS unit concurrency SOURCES
    unit/connection_loop_keep_alive_test.cc)
  # OpenAI's Responses API: its request fields, the response object and the stream's events
  # (pure functions), and the store of responses (LRU within a byte budget; threads meet there).
  siesta_test_sources(server_tests LABELS unit SOURCES unit/responses_json_test.cc)
  siesta_test_sources(server_tests LABELS unit concurrency SOURCES unit/response_store_test.cc)
  siesta_finish_test_binary(server_tests)
endif()
