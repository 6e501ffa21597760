# An unchanged PyTorch DDP script: the torchrun environment (RANK, WORLD_SIZE, MASTER_ADDR,
# MASTER_PORT) is all it reads.
import os
import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(rank)
for step in range(20):
    x = torch.randn(32, 8, generator=g)
    loss = ((model(x) - x.sum(dim=1, keepdim=True)) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
w = model.module.weight.detach().clone()
ws = [torch.zeros_like(w) for _ in range(world)]
dist.all_gather(ws, w)
same = all(torch.equal(ws[0], o) for o in ws)
print(f"ddp rank {rank}/{world} local_rank {os.environ.get('LOCAL_RANK')} loss {loss.item():.4f} weights_equal {same}", flush=True)
dist.destroy_process_group()
