#!/usr/bin/python3
"""PyTorch peer of train_bench: the same MLP and LeNet, batch and SGD step,
timed the same way (best of --repeats). Prints one line per network:
`<net> <samples/s>`.
Exits with status 3 when torch is not installed, or --device cuda has no GPU
(the caller then skips it).
Thread settings come from the environment the caller sets
(OMP_NUM_THREADS, OPENBLAS_NUM_THREADS) and --threads.
"""
import argparse
import sys
import time

try:
    import torch
except ImportError:
    print("torch is not installed for " + sys.executable)
    sys.exit(3)


def mlp():
    return torch.nn.Sequential(
        torch.nn.Linear(784, 128), torch.nn.ReLU(),
        torch.nn.Linear(128, 64), torch.nn.ReLU(),
        torch.nn.Linear(64, 10))


def lenet():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 20, 5), torch.nn.Tanh(), torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(20, 50, 5), torch.nn.Tanh(), torch.nn.MaxPool2d(2),
        torch.nn.Flatten(), torch.nn.Linear(800, 500), torch.nn.Tanh(),
        torch.nn.Linear(500, 10))


def measure(net, shape, batches, seconds, repeats, device):
    net = net.to(device)
    data = [torch.rand(*shape, device=device) for _ in range(batches)]
    labels = [torch.randint(0, 10, (shape[0],), device=device) for _ in range(batches)]
    # GPU work is queued: the clock is read after the queue drains.
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    opt = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step(i):
        opt.zero_grad()
        loss = loss_fn(net(data[i % batches]), labels[i % batches])
        loss.backward()
        opt.step()

    for i in range(10):
        step(i)
    sync()
    best = 0.0
    for _ in range(repeats):
        n = 0
        start = time.perf_counter()
        while time.perf_counter() - start < seconds:
            step(n)
            n += 1
        sync()
        best = max(best, n * shape[0] / (time.perf_counter() - start))
    return best


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--seconds", type=float, default=2.0)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--nets", default="mlp,lenet")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--no-tf32", action="store_true",
                   help="cuDNN convolutions in plain FP32, as kvtrain's "
                   "(PyTorch's default lets them use TF32)")
    args = p.parse_args()
    if args.no_tf32:
        torch.backends.cudnn.allow_tf32 = False
    if args.device == "cuda" and not torch.cuda.is_available():
        print("torch %s in %s sees no GPU" % (torch.__version__, sys.executable))
        sys.exit(3)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    shapes = {"mlp": (args.batch, 784), "lenet": (args.batch, 1, 28, 28)}
    makers = {"mlp": mlp, "lenet": lenet}
    for name in args.nets.split(","):
        rate = measure(makers[name](), shapes[name], 10, args.seconds,
                       args.repeats, args.device)
        print("%s %.1f" % (name, rate), flush=True)


if __name__ == "__main__":
    main()
