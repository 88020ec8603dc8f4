# The snapshot directory's owner (SnapshotStore) and the fault-injecting FileSystem that the
# snapshot write protocol is tested through.
siesta_add_gtest(faulty_file_system_test
  SOURCES fault_injection/faulty_file_system_test.cc
  LABELS fault_injection
  LIBS)

siesta_add_gtest(snapshot_store_test
  SOURCES unit/snapshot_store_test.cc
  LABELS unit
  LIBS)
