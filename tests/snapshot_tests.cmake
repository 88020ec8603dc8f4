# Snapshot files: the format codec, the sealers, writer + reader (unit), the RapidCheck
# properties (round trip, every flipped byte, every truncation, swapped chunks, foreign keys,
# expiry) and the reader's fuzz target with its corpus of valid files.
siesta_add_gtest(snapshot_format_test SOURCES unit/snapshot_format_test.cc LABELS unit
                 LIBS)
siesta_add_gtest(chunk_sealer_test SOURCES unit/chunk_sealer_test.cc LABELS unit
                 LIBS)
# Uses the SimBackend's device stream thread for the device regions.
siesta_add_gtest(snapshot_file_test SOURCES unit/snapshot_file_test.cc LABELS unit concurrency
                 LIBS siesta_backend_sim)
siesta_add_gtest(snapshot_property_test SOURCES property/snapshot_property_test.cc
                 LABELS property LIBS PROPERTY)
# The real writer and reader over a FaultyFileSystem: a fault at each call of the write
# protocol, once and sticky, a crash after each call, seeded plans, and NoSpace before a byte
# (the table of outcomes: docs/TESTING.md, "Snapshot write protocol under faults").
siesta_add_gtest(snapshot_write_faults_test
  SOURCES fault_injection/snapshot_write_faults_test.cc
  LABELS fault_injection
  LIBS siesta_backend_sim)
# Durable exports (core/snapshot/snapshot_export.h); device regions through the SimBackend.
siesta_add_gtest(snapshot_export_test SOURCES unit/snapshot_export_test.cc LABELS unit
                 LIBS siesta_backend_sim)
# read_snapshot_expiry, and the store wired to the process key's nonce and to it.
siesta_add_gtest(snapshot_expiry_test SOURCES unit/snapshot_expiry_test.cc LABELS unit
                 LIBS)
# Writer and reader on several threads (core/snapshot/internal/chunk_pipeline.h): 1, 2 and 4 threads agree, the
# first failure in file order decides a read, write faults and cancellation leave no file.
siesta_add_gtest(snapshot_parallel_test SOURCES unit/snapshot_parallel_test.cc
                 LABELS unit concurrency LIBS siesta_backend_sim)
# A hostile snapshot directory under a sleeping session, through the real engine: a replayed
# older snapshot, a FIFO and a directory in the snapshot's place.
siesta_add_gtest(snapshot_replay_test SOURCES unit/snapshot_replay_test.cc LABELS unit
                 LIBS siesta_engine siesta_backend_sim)
