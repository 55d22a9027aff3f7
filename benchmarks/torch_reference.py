# PyTorch reference for the kernel benchmark: torchvision MODEL at 224x224, BATCH, 2 threads,
# no_grad, images/s over 20 s. Usage: /usr/bin/python3 benchmarks/torch_reference.py resnet50 8
import time, torch, torchvision, sys
torch.set_num_threads(2)
name, batch = sys.argv[1], int(sys.argv[2])
m = getattr(torchvision.models, name)().eval()
x = torch.randn(batch, 3, 224, 224)
with torch.no_grad():
    for _ in range(2): m(x)
    n, t0 = 0, time.time()
    while time.time() - t0 < 20:
        m(x); n += batch
print(f"torch {torch.__version__} {name} batch {batch}: {n/(time.time()-t0):.2f} images/s")
