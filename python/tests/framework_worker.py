"""One process of test_frameworks.py: muonc.torch.Muon inside the
frameworks that own the training loop (the Hugging Face Trainer,
accelerate, Lightning, torchtitan's optimizer container), run as a script
under torchrun (or alone for one process):

    framework_worker.py SCENARIO OUT_DIR [ARG]

Each scenario writes OUT_DIR/<scenario>[-<arg>].<rank>.pt: the trained
parameters by name, the losses, and what the test checks beside them. The
model is a 2-layer GPT-2 from its config, small enough for the CPU."""
import os
import sys

import torch
import torch.distributed as dist

VOCAB, POSITIONS, WIDTH = 64, 16, 32
STEPS, SAVE_AT = 8, 4


def gpt2(seed=0):
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging
    logging.set_verbosity_error()
    torch.manual_seed(seed)
    config = GPT2Config(n_layer=2, n_embd=WIDTH, n_head=4, vocab_size=VOCAB,
                        n_positions=POSITIONS, bos_token_id=0,
                        eos_token_id=0, tie_word_embeddings=False,
                        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    return GPT2LMHeadModel(config)


class Tokens(torch.utils.data.Dataset):
    """Fixed random token sequences (a language-model batch: labels are
    the inputs)."""

    def __init__(self, n=64, seed=1):
        g = torch.Generator().manual_seed(seed)
        self.data = torch.randint(0, VOCAB, (n, POSITIONS), generator=g)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return {"input_ids": self.data[i], "labels": self.data[i]}


def rank():
    return dist.get_rank() if dist.is_initialized() else 0


def params_of(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def save(out, name, result):
    world = dist.get_world_size() if dist.is_initialized() else 1
    torch.save(result, os.path.join(out, f"{name}-w{world}.{rank()}.pt"))


# --- the Hugging Face Trainer --------------------------------------------

def hf_arguments(out, **kw):
    from transformers import TrainingArguments
    args = dict(output_dir=out, per_device_train_batch_size=2,
                gradient_accumulation_steps=2, max_steps=STEPS,
                save_strategy="steps", save_steps=SAVE_AT, logging_steps=1,
                report_to="none", use_cpu=True, seed=0, data_seed=0,
                disable_tqdm=True, lr_scheduler_type="linear",
                max_grad_norm=1.0, dataloader_num_workers=0,
                save_only_model=False)
    args.update(kw)
    return TrainingArguments(**args)


def hf_train(out, resume=False, owner=False, factory=True, **kw):
    """The Trainer on the GPT-2 for STEPS steps, checkpointing every
    SAVE_AT; or resumed from the checkpoint at SAVE_AT. The optimizer is
    made before TrainingArguments, which starts the process group under
    torchrun (muonc binds at the first step)."""
    import muonc.torch as mt
    import muonc.torch.hf  # noqa: F401
    from transformers import Trainer
    model = gpt2()
    opt = None
    if not factory:
        opt = mt.Muon.for_model(model, lr=0.02, adamw_lr=3e-3)
    args = hf_arguments(out, **kw)
    trainer_kw = ({"optimizer_cls_and_kwargs": (
        mt.MuonFactory, {"lr": 0.02, "adamw_lr": 3e-3})} if factory
        else {"optimizers": (opt, None)})
    trainer = Trainer(model=model, args=args, train_dataset=Tokens(),
                      **trainer_kw)
    if owner:
        mt.hf.reduce_gradients_to_owners(trainer)
    losses = []

    from transformers import TrainerCallback

    class Losses(TrainerCallback):
        def on_log(self, args, state, control, logs=None, **k):
            if logs and "loss" in logs:
                losses.append(logs["loss"])

    trainer.add_callback(Losses())
    checkpoint = os.path.join(out, f"checkpoint-{SAVE_AT}") if resume \
        else None
    trainer.train(resume_from_checkpoint=checkpoint)
    muon = mt.hf.muon_of(trainer.optimizer)
    return {"params": params_of(model), "losses": losses,
            "world_size": muon.engine.world_size,
            "assignments": muon.assignments,
            "groups": [(g["name"], g["lr"], len(g["params"]))
                       for g in muon.param_groups],
            "owner_reduced": bool(muon._options.get("owner_reduced"))}


def scenario_hf(out, mode):
    """mode: plain | owner | early (the optimizer made before the process
    group, given to the Trainer as is)."""
    runs = os.path.join(out, mode)
    owner = mode == "owner"
    factory = mode != "early"
    straight = hf_train(runs, owner=owner, factory=factory)
    resumed = hf_train(runs, resume=True, owner=owner, factory=factory)
    save(out, f"hf-{mode}", {"straight": straight, "resumed": resumed})


# --- accelerate ------------------------------------------------------------

def scenario_accelerate_fsdp2(out, which):
    """accelerate's FSDP2 path (the HF Trainer's with fsdp_version 2 on
    GPUs), forced on the CPU: the optimizer is made before prepare(),
    which fully_shards the model and swaps param_groups' tensors for the
    sharded ones."""
    from accelerate import Accelerator
    from accelerate.utils import DistributedType, FullyShardedDataParallelPlugin
    import muonc.torch as mt
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2)
    acc = Accelerator(fsdp_plugin=plugin, cpu=True)
    acc.state.distributed_type = DistributedType.FSDP
    acc.state.fsdp_plugin = plugin
    model = gpt2()
    groups = mt.param_groups(model, adamw_lr=3e-3)
    before = params_of(model)
    if which == "torch":
        muon = [g for g in groups if g["use_muon"]][0]
        adamw = [g for g in groups if not g["use_muon"]][0]
        opts = [torch.optim.Muon(muon["params"], lr=0.02),
                torch.optim.AdamW(adamw["params"], lr=3e-3,
                                  betas=adamw["betas"], eps=adamw["eps"],
                                  weight_decay=adamw["weight_decay"])]
    else:
        opts = [mt.Muon(groups, lr=0.02)]
    model, *opts = acc.prepare(model, *opts)
    data = Tokens().data[:8][acc.process_index::acc.num_processes]
    losses = []
    for _ in range(6):
        loss = model(input_ids=data, labels=data).loss
        acc.backward(loss)
        for o in opts:
            o.step()
            o.zero_grad()
        losses.append(loss.item())
    moved = max((p.full_tensor() - before[n]).abs().max().item()
                for n, p in model.named_parameters())
    save(out, f"accelerate-fsdp2-{which}", {"losses": losses,
                                            "moved": moved})


def scenario_accelerate(out, mode):
    """accelerate's plain path (one process or DDP) with save_state and
    load_state: mode straight | resumed."""
    from accelerate import Accelerator
    from accelerate.utils import set_seed
    import muonc.torch as mt
    acc = Accelerator(cpu=True)
    set_seed(0)
    model = gpt2()
    opt = mt.Muon.for_model(model, lr=0.02, adamw_lr=3e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1 - s / 16)
    loader = torch.utils.data.DataLoader(Tokens(64), batch_size=4)
    model, opt, loader, sched = acc.prepare(model, opt, loader, sched)
    checkpoint = os.path.join(out, "accelerate-state")
    start = 0
    if mode == "resumed":
        acc.load_state(checkpoint)
        start = SAVE_AT
    losses = []
    for step, batch in enumerate(loader):
        if step < start:
            continue
        if step == STEPS:
            break
        loss = model(**batch).loss
        acc.backward(loss)
        acc.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        losses.append(loss.item())
        if mode == "straight" and step + 1 == SAVE_AT:
            acc.save_state(checkpoint)
    save(out, f"accelerate-{mode}", {
        "params": params_of(acc.unwrap_model(model)), "losses": losses})


# --- Lightning ---------------------------------------------------------------

def lightning_module(owner):
    import lightning.pytorch as pl
    import muonc.torch as mt

    class GPT(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = gpt2()
            self.losses = []

        def training_step(self, batch, index):
            loss = self.model(**batch).loss
            self.losses.append(loss.item())
            return loss

        def configure_optimizers(self):
            opt = (mt.Muon.for_model(self.model, lr=0.02, adamw_lr=3e-3)
                   if not os.environ.get("TORCH_ADAMW") else
                   torch.optim.AdamW(self.model.parameters(), lr=3e-3))
            sched = torch.optim.lr_scheduler.LambdaLR(
                opt, lambda s: 1 - s / (2 * STEPS))
            return {"optimizer": opt, "lr_scheduler": {
                "scheduler": sched, "interval": "step"}}

        def on_train_start(self):
            if owner:
                # The DDP module exists from here on.
                self.optimizers().optimizer.reduce_gradients_to_owners(
                    self.trainer.strategy.model)

    return GPT()


def scenario_lightning(out, mode):
    """Lightning (one process, or DDP under torchrun) with gradient
    accumulation, a step-wise LambdaLR, gradient_clip_val and its
    checkpoints, resumed from the one at SAVE_AT. mode: plain | owner
    (reduce_gradients_to_owners at on_train_start). The data loader is
    torchdata's StatefulDataLoader, whose position Lightning's checkpoints
    keep (a plain DataLoader restarts its epoch on resuming)."""
    import lightning.pytorch as pl
    from lightning.pytorch.callbacks import ModelCheckpoint
    from torchdata.stateful_dataloader import StatefulDataLoader
    world = int(os.environ.get("WORLD_SIZE", "1"))
    runs = os.path.join(out, f"lightning-{mode}")
    results = {}
    for run in ("straight", "resumed"):
        pl.seed_everything(0, verbose=False)
        module = lightning_module(mode == "owner")
        data = StatefulDataLoader(Tokens(4 * STEPS * world), batch_size=2)
        checkpoints = ModelCheckpoint(dirpath=runs, save_top_k=-1,
                                      every_n_train_steps=SAVE_AT,
                                      filename="{step}")
        trainer = pl.Trainer(
            accelerator="cpu", devices=world, default_root_dir=runs,
            enable_checkpointing=run == "straight",
            strategy="ddp" if world > 1 else "auto", max_steps=STEPS,
            accumulate_grad_batches=2, gradient_clip_val=0.5, logger=False,
            enable_progress_bar=False, enable_model_summary=False,
            callbacks=[checkpoints] if run == "straight" else [])
        trainer.fit(module, data, ckpt_path=(
            os.path.join(runs, f"step={SAVE_AT}.ckpt") if run == "resumed"
            else None))
        opt = module.optimizers().optimizer
        results[run] = {"params": params_of(module.model),
                        "losses": module.losses,
                        "world_size": opt.engine.world_size,
                        "owner_reduced": bool(
                            opt._options.get("owner_reduced"))}
    save(out, f"lightning-{mode}", results)


# --- torchtitan's optimizer container -------------------------------------------

def titan_container(model):
    """torchtitan's OptimizersContainer with muonc registered as "Muon"
    (its factories take (groups, **kwargs), each group with param_names,
    fused and foreach): embeddings, the head, norms and biases in muonc's
    AdamW groups, the other matrices in Muon."""
    from torchtitan.components.optimizer import (OptimizersContainer,
                                                 ParamGroupConfig)
    import muonc.torch as mt

    class Container(OptimizersContainer):
        @staticmethod
        def _resolve_optimizer_factory(name):
            if name == "Muon":
                return mt.Muon
            return OptimizersContainer._resolve_optimizer_factory(name)

    adamw = {"use_muon": False, "lr": 3e-3, "betas": (0.9, 0.95),
             "weight_decay": 0.0}
    config = Container.Config(param_groups=[
        ParamGroupConfig(pattern=r"wte|wpe|lm_head|ln_|bias$",
                         optimizer_name="Muon", optimizer_kwargs=adamw),
        ParamGroupConfig(pattern=r".*", optimizer_name="Muon",
                         optimizer_kwargs={"lr": 0.02})])
    return Container(config, model_parts=[model])


def scenario_torchtitan(out, _):
    """FSDP2 over every rank, torchtitan's container and its flat,
    FQN-keyed state dict saved and loaded with torch.distributed.checkpoint:
    SAVE_AT steps, a checkpoint, STEPS - SAVE_AT more; the same resumed in a
    fresh model and container (whose state_dict() first takes torchtitan's
    zero-gradient, lr-0 step, which must change nothing)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.fsdp import fully_shard
    dist.init_process_group("gloo")
    where = os.path.join(out, "titan-dcp")

    def make():
        model = gpt2()
        for block in model.transformer.h:
            fully_shard(block)
        fully_shard(model)
        return model, titan_container(model)

    data = Tokens().data[:8][rank()::dist.get_world_size()]

    def train(model, opt, steps):
        for _ in range(steps):
            loss = model(input_ids=data, labels=data).loss
            loss.backward()
            opt.step()
            opt.zero_grad()

    def whole(model):
        return {n: p.full_tensor().clone() for n, p in
                model.named_parameters()}

    model, opt = make()
    train(model, opt, SAVE_AT)
    dcp.save({"optimizer": opt.state_dict()}, checkpoint_id=where)
    train(model, opt, STEPS - SAVE_AT)
    straight = whole(model)
    fresh, fresh_opt = make()
    before = whole(fresh)
    flat = fresh_opt.state_dict()  # torchtitan's init_optim_state step
    unchanged = all(torch.equal(before[n], p) for n, p in
                    whole(fresh).items())
    state = {"optimizer": flat}
    dcp.load(state, checkpoint_id=where)
    # The model's own weights at SAVE_AT: the straight run's, replayed.
    replay, replay_opt = make()
    train(replay, replay_opt, SAVE_AT)
    with torch.no_grad():
        for p, q in zip(fresh.parameters(), replay.parameters()):
            p.copy_(q)
    fresh_opt.load_state_dict(state["optimizer"])
    train(fresh, fresh_opt, STEPS - SAVE_AT)
    muon = fresh_opt.optimizers[0]
    save(out, "torchtitan", {
        "straight": straight, "resumed": whole(fresh),
        "lr0_step_unchanged": unchanged,
        "groups": [(g["name"], g["use_muon"], g.get("fused"),
                    len(g["params"])) for g in muon.param_groups],
        "world_size": muon.engine.world_size,
        "keys": sorted(k for k in flat if k.startswith("state."))[:6]})


SCENARIOS = {"hf": scenario_hf,
             "accelerate-fsdp2": scenario_accelerate_fsdp2,
             "accelerate": scenario_accelerate,
             "lightning": scenario_lightning,
             "torchtitan": scenario_torchtitan}


def main():
    name, out = sys.argv[1], sys.argv[2]
    arg = sys.argv[3] if len(sys.argv) > 3 else None
    torch.set_num_threads(1)
    try:
        SCENARIOS[name](out, arg)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


if __name__ == "__main__":
    main()
