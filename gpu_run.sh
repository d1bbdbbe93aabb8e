#!/bin/bash
# Temporary (not committed): the GPU machine's run of this round's code.
set -x
export LD_LIBRARY_PATH=$PWD/build/gpu-lib EC_STORE_BIN=$PWD/build/ec-store PYTHONPATH=$PWD/build-gpu-py/python
nvidia-smi --query-gpu=name --format=csv,noheader
timeout 120 ./build/ecstore_tests --gtest_filter='PutArena*:NetShm*' 2>&1 | tail -3
timeout 200 python3 -m pytest -q -p no:cacheprovider python/tests/test_cuda.py 2>&1 | tail -3
# A/B: the saver through a same-host daemon into its put arena (now) against staged through
# a pinned buffer and the socket (before), alternated.
mkdir -p /tmp/staged && cp -r build-gpu-py/python/ecstore /tmp/staged/
sed -i 's/self._reserve = cache.transport in ("local", "shm")/self._reserve = cache.transport == "local"/' /tmp/staged/ecstore/transfer.py
grep -c 'self._reserve = cache.transport == "local"' /tmp/staged/ecstore/transfer.py
for i in ${PAIRS:-1}; do
  timeout 150 python3 -m ecstore.bench --reps 30 --json $OUT/arena$i.json 2>&1 | grep -E "ecstore-daemon|ecstore-embedded|limit" 
  PYTHONPATH=/tmp/staged timeout 150 python3 -m ecstore.bench --reps 30 --json $OUT/staged$i.json 2>&1 | grep -E "ecstore-daemon|limit"
done
