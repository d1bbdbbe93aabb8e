# Runs inside the Soft-RoCE VM (tests/rdma-vm/run.sh): the verbs tests against rxe0.
# Each test runs in a process of its own, so one that fails (or aborts) fails alone and the
# rest still run. Verbs emulated under TCG run several times slower than on hardware: the
# tests' deadlines are scaled by EC_TEST_TIME_SCALE.
export EC_TEST_TIME_SCALE=${EC_TEST_TIME_SCALE:-4}
# Here the tests must find rxe0: a test that would skip for want of a device fails instead.
export EC_REQUIRE_RDMA=1
failed=""
for t in $(ecstore_rdma_tests --gtest_list_tests | awk '/^[^ ]/ {s = $1} /^  / {print s $1}'); do
  ecstore_rdma_tests --gtest_color=no --gtest_filter="$t" || failed="$failed $t"
done
if [ -n "$failed" ]; then
  echo "RDMA tests failed:$failed"
  exit 1
fi
echo "RDMA tests: all passed"
