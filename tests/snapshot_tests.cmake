# Snapshot files: the format codec, the sealers, writer + reader (unit), the RapidCheck
# properties (round trip, every flipped byte, every truncation, swapped chunks, foreign keys,
# expiry) and the reader's fuzz target with its corpus of valid files.
siesta_add_gtest(snapshot_format_test SOURCES unit/snapshot_format_test.cc LABELS unit
                 LIBS siesta_core)
siesta_add_gtest(chunk_sealer_test SOURCES unit/chunk_sealer_test.cc LABELS unit
                 LIBS siesta_core)
# Uses the SimBackend's device stream thread for the device regions.
siesta_add_gtest(snapshot_file_test SOURCES unit/snapshot_file_test.cc LABELS unit concurrency
                 LIBS siesta_backend_sim siesta_core)
siesta_add_gtest(snapshot_property_test SOURCES property/snapshot_property_test.cc
                 LABELS property LIBS siesta_core PROPERTY)
