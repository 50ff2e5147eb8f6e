"""What the PyTorch reference steps (torch_bert_step.py, torch_resnet_step.py) share: the device and precision a
MODE names, and one timed training step. Not a benchmark by itself.
"""
import time
import torch

MODES = ("cpu", "cuda:fp32", "cuda:tf32", "cuda:fp16")


def mode_setup(mode, threads):
    """(device, loss scaler or None) for MODE; TF32 is on only in cuda:tf32, so cuda:fp32 is true FP32."""
    if mode not in MODES:
        raise SystemExit(f"MODE must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "cpu":
        torch.set_num_threads(threads)
        return "cpu", None
    if not torch.cuda.is_available():
        raise SystemExit("MODE cuda:* needs a GPU that PyTorch can use")
    tf32 = mode == "cuda:tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True
    return "cuda", torch.amp.GradScaler("cuda") if mode == "cuda:fp16" else None


def timed_step(dev, scaler, opt, loss_fn):
    """Seconds of one step (zero grads, forward, backward, update), the GPU synchronised at both ends; with a
    scaler, the forward runs under FP16 autocast and the update goes through the scaler."""
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    sync()
    t0 = time.perf_counter()
    opt.zero_grad(set_to_none=True)
    if scaler is None:
        loss_fn().backward()
        opt.step()
    else:
        with torch.autocast("cuda", dtype=torch.float16):
            loss = loss_fn()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    sync()
    return time.perf_counter() - t0
