# Runs inside the Soft-RoCE VM (tests/rdma-vm/run.sh): the verbs tests against rxe0.
ecstore_rdma_tests --gtest_color=no
