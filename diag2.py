import ctypes, mmap, os, torch, numpy as np
libc = ctypes.CDLL(None, use_errno=True)
N = 64 << 20
fd = os.memfd_create("t", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
os.ftruncate(fd, N)
rw = mmap.mmap(fd, N, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
ro = mmap.mmap(fd, N, mmap.MAP_SHARED, mmap.PROT_READ)
a = np.frombuffer(rw, dtype=np.uint8)
b = np.frombuffer(ro, dtype=np.uint8)
addr = a.ctypes.data
prefault = os.environ.get("PREFAULT")
if prefault == "write": a[::4096] = 0
if prefault == "read": _ = a[::4096].sum()
err = torch.cuda.cudart().cudaHostRegister(addr, N, int(os.environ.get("FLAGS", "0")))
print("register", int(err))
t = torch.from_numpy(a)
for rep in range(3):
    src = torch.full((N // 2,), rep + 1, dtype=torch.int16, device="cuda:0")
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        t[: N].copy_(src.view(torch.uint8), non_blocking=True)
    s.synchronize()
    print(rep, "client sees", a[:4].tolist(), "server sees", b[:4].tolist(), "server zeros", int((b[:1<<20] == 0).sum()))
