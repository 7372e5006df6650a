"""A small PyTorch training program, written for capture under nsys (a third-party fixture).

What it exercises: cuDNN convolutions under autocast bf16, torch.compile'd Triton kernels,
one CUDA graph replayed, work on a second stream, a data-loading thread, and NVTX ranges both in
the default domain (torch.cuda.nvtx) and in a named domain (the nvtx package)."""
import threading

import nvtx
import torch
import torch.nn as nn

torch.manual_seed(0)
dev = "cuda"
DOMAIN = nvtx.get_domain("trainer")


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 32, 3, padding=1)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1)
        self.bn = nn.BatchNorm2d(64)
        self.fc = nn.Linear(64 * 8 * 8, 10)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = nn.functional.max_pool2d(torch.relu(self.bn(self.conv2(x))), 4)
        return self.fc(x.flatten(1))


model = Net().to(dev)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
loss_fn = nn.CrossEntropyLoss()


@torch.compile
def fused_post(x, y):
    # a pointwise chain Inductor turns into one Triton kernel
    return torch.tanh(x) * torch.sigmoid(y) + 0.5 * x


batches = []


def loader():
    # a host thread producing batches, named so that the trace shows it
    for i in range(6):
        with nvtx.annotate(f"load_{i}", domain="loader"):
            batches.append((torch.randn(64, 3, 32, 32).pin_memory(), torch.randint(0, 10, (64,)).pin_memory()))


t = threading.Thread(target=loader, name="data-loader")
t.start()
t.join()

side = torch.cuda.Stream()
for step, (xb, yb) in enumerate(batches[:4]):
    torch.cuda.nvtx.range_push(f"train_step_{step}")
    rng = DOMAIN.start_range(DOMAIN.get_event_attributes(message=f"step_{step}"))
    x, y = xb.to(dev, non_blocking=True), yb.to(dev, non_blocking=True)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        out = model(x)
        loss = loss_fn(out, y)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    with torch.cuda.stream(side):
        # independent work on a second stream
        z = fused_post(torch.randn(1 << 20, device=dev), torch.randn(1 << 20, device=dev))
        s = z.sum()
    torch.cuda.current_stream().wait_stream(side)
    DOMAIN.end_range(rng)
    torch.cuda.nvtx.range_pop()

# one CUDA graph of the forward pass, captured and replayed
static_x = torch.randn(64, 3, 32, 32, device=dev)
model.eval()
g = torch.cuda.CUDAGraph()
with torch.no_grad():
    warm = torch.cuda.Stream()
    warm.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(warm):
        for _ in range(2):
            model(static_x)
    torch.cuda.current_stream().wait_stream(warm)
    with torch.cuda.graph(g):
        static_out = model(static_x)
for i in range(3):
    with nvtx.annotate(f"graph_replay_{i}", domain="trainer"):
        g.replay()
torch.cuda.synchronize()
print("loss", float(loss), "sum", float(s), "graph", float(static_out.sum()))
