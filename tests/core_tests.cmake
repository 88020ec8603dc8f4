# core: Status/Result, clocks, the staging ring, the range ledger, the POSIX file system.
siesta_add_gtest(status_test SOURCES unit/status_test.cc LABELS unit LIBS)
siesta_add_gtest(clock_test SOURCES unit/clock_test.cc LABELS unit LIBS)
siesta_add_gtest(staging_ring_test SOURCES unit/staging_ring_test.cc LABELS unit LIBS)
# The record buffers snapshot reads and writes keep between calls, and their reuse.
siesta_add_gtest(record_buffer_pool_test SOURCES unit/record_buffer_pool_test.cc LABELS unit
                 LIBS)
# Header-only bookkeeping of both memory backends; no device needed.
siesta_add_gtest(range_ledger_test SOURCES unit/range_ledger_test.cc LABELS unit LIBS)
siesta_add_gtest(posix_file_system_test SOURCES unit/posix_file_system_test.cc LABELS unit
                 LIBS)
siesta_add_gtest(log_text_test SOURCES unit/log_text_test.cc LABELS unit LIBS)
