# Runs inside the Soft-RoCE VM (make bench-rdma): gets over verbs vs TCP on rxe0's address.
ec-store-bench --workloads rdma --dir /tmp/bench
