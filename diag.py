import os, subprocess, re, sys, torch, tempfile
import ecstore
from ecstore.transfer import AsyncSaver
root = tempfile.mkdtemp()
proc = subprocess.Popen([os.environ["EC_STORE_BIN"], "--dir", root + "/d", "--pool-size", "2GiB", "serve", "--listen", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
port = re.search(r"port (\d+)", proc.stdout.readline()).group(1)
c = ecstore.connect(f"tcp://127.0.0.1:{port}")
print("transport", c.transport)
c.register_with_cuda()
s = AsyncSaver(c, "ns")
if os.environ.get("NOREG"): s._register_arena = lambda a: None
if os.environ.get("NOHUGE"):
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    orig = s._register_arena
    def reg(a):
        if a != (0, 0) and a != s._arena:
            rc = libc.madvise(ctypes.c_void_p(a[0]), ctypes.c_size_t(a[1]), 15)
            print("madvise NOHUGEPAGE", rc)
        orig(a)
    s._register_arena = reg
shapes = {"2.87MB": (400, 3584), "10.6MB": (1296, 4096), "16.5MB": (2016, 4096), "57.8MB": (7056, 4096)}
bad = 0
for label, shape in shapes.items():
    src = torch.randn(shape, dtype=torch.float32).to(torch.bfloat16).to("cuda:0")
    for r in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
        key = f"{label}-{r}"
        s.save(key, src); s.wait()
        got = c.get("ns", key)  # to CPU
        ok = torch.equal(got.view(torch.int16), src.cpu().view(torch.int16))
        gd = c.get("ns", key, device="cuda:0")
        okd = torch.equal(gd.view(torch.int16), src.view(torch.int16))
        if not (ok and okd):
            bad += 1
            diff = (got.view(torch.int16) != src.cpu().view(torch.int16)).nonzero()
            print(label, r, "cpu ok", ok, "dev ok", okd, "arena", s._arena, "first diff", diff[:1].tolist(), "ndiff", diff.shape[0], "zeros in got", (got.view(torch.int16)==0).sum().item())
print("bad", bad)
s.close(); c.close(); proc.terminate()
