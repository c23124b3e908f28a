"""What the torch benchmarks of the example GPT share: the example module
(examples/torch/train_gpt.py, loaded by path) and starting one spawned
process per rank."""
import importlib.util
import os

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                       "examples", "torch", "train_gpt.py")


def load_example():
    spec = importlib.util.spec_from_file_location("train_gpt", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def spawn(rank_main, args):
    """rank_main(rank, args, None) on args.ranks spawned processes."""
    import torch.multiprocessing as mp
    mp.start_processes(rank_main, args=(args, None), nprocs=args.ranks,
                       join=True, start_method="spawn")
