"""A small PyTorch training loop, as most are written: no profiler code in it.

    stepscope profile -- python examples/pytorch_train.py --steps 20

stepscope marks a step at each ``optimizer.step()``.
"""

import argparse

import torch
from torch import nn


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    data = torch.randn(args.steps * args.batch, 128)
    labels = torch.randint(0, 10, (args.steps * args.batch,))
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data, labels),
                                         batch_size=args.batch)
    for x, y in loader:
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
    print(f"final loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
