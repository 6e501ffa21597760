# The policy loader's sources, one list for the build (schedd/policy/CMakeLists.txt) and the fuzz
# build (fuzz/CMakeLists.txt): a reader added here is linked by both.
set(MLSCHED_POLICY_SOURCES
  policy_loader.cc
  policy_reader.cc
  placement_reader.cc
  association_reader.cc
  simulation_reader.cc
  provisioning_reader.cc
  inventory_reader.cc
  interactive_reader.cc
  health_reader.cc
  idle_reader.cc
)
