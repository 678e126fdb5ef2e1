"""Reading Hugging Face checkpoints box by box, DeepSeek's block fp8 with its scales.

* the reader reads exactly the bytes of the box asked for (rows, columns, across shards);
* a block-fp8 weight is read with the scales of the blocks it overlaps (partial blocks at
  the edges, as DeepSeek's ceil-division layout has them), or kept as fp8 values and
  scales; an fp8 tensor without scales is refused, and ``place_model`` never casts one;
* LoRA never targets scale tensors;
* a model built on meta with its adapter, then read, is ``from_pretrained``'s model with
  the adapter ``apply_lora`` draws; an fp8 checkpoint gives the dequantized model, or keeps
  its experts in fp8 with the same logits and LoRA gradients.
"""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from hf_checkpoints import (
    QUANT_CONFIG,
    _save_shards,
    quantize_blocks,
    tiny_model,
    write_block_fp8,
    write_sharded,
)

from agentgym import ConfigError
from agentgym.generation import adapter_state_dict, load_model, place_model
from agentgym.trainers.config import LoraSettings, ModelConfig
from agentgym.trainers.hf_reader import CheckpointReader, dequantize_blocks
from agentgym.trainers.loading import (
    CheckpointSource,
    load_whole_model,
    local_bytes,
    meta_model_and_tokenizer,
)
from agentgym.trainers.models import (
    apply_lora,
    apply_lora_on_meta,
    build_model_and_tokenizer,
    build_on_meta,
    resolve_lora_targets,
)

LORA = LoraSettings(r=4, alpha=8)
CPU = torch.device("cpu")


def _write(path, tensors, config=None):
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config or {}))
    _save_shards(tensors, path, 2)
    return path


def test_the_reader_reads_the_box_and_nothing_else(tmp_path):
    gen = torch.Generator().manual_seed(0)
    a, b = torch.randn(7, 10, generator=gen), torch.randn(3, 4, 6, generator=gen)
    c = torch.randn(5, 9, generator=gen).to(torch.bfloat16)
    reader = CheckpointReader(_write(tmp_path, {"a": a, "b": b, "c": c}))  # two shards
    for name, t, box in [
        ("a", a, [(2, 5), (0, 10)]),  # rows: one run
        ("a", a, [(1, 6), (3, 8)]),  # a column slice: one run per row
        ("b", b, [(1, 3), (0, 4), (2, 5)]),
        ("c", c, [(0, 5), (4, 9)]),
    ]:
        before = reader.bytes_read
        got = reader.read(name, box)
        want = t[tuple(slice(i, j) for i, j in box)]
        assert got.dtype == t.dtype and torch.equal(got, want)
        assert reader.bytes_read - before == want.numel() * want.element_size()
    out = torch.empty(3, 10)
    assert reader.read("a", [(4, 7), (0, 10)], out=out) is out and torch.equal(out, a[4:7])
    with pytest.raises(ConfigError, match="no tensor 'd'"):
        reader.read("d")
    with pytest.raises(ConfigError, match="does not fit"):
        reader.read("a", [(0, 8), (0, 10)])


def test_a_block_fp8_weight_is_read_with_the_scales_of_its_blocks(tmp_path):
    w = torch.randn(300, 200, generator=torch.Generator().manual_seed(1))  # partial blocks
    q, s = quantize_blocks(w)
    assert s.shape == (3, 2)  # ceil(300 / 128) x ceil(200 / 128)
    config = {"quantization_config": QUANT_CONFIG}
    bare = torch.zeros(4, 4).to(torch.float8_e4m3fn)
    reader = CheckpointReader(_write(tmp_path, {"w": q, "w_scale_inv": s, "bare": bare}, config))
    full = dequantize_blocks(q, s, (128, 128))
    assert (full - w).abs().max() < 0.07 * w.abs().max()  # e4m3: ~3 significant bits
    torch.testing.assert_close(reader.read_weight("w", None, torch.float32), full)
    box = [(100, 260), (50, 190)]  # crosses block edges in both dimensions
    got = reader.read_weight("w", box, torch.bfloat16)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got, full[100:260, 50:190].to(torch.bfloat16))
    kept_q, kept_s = reader.read_weight("w", [(128, 300), (0, 200)], torch.float32, keep_fp8=True)
    assert kept_q.dtype == torch.float8_e4m3fn and torch.equal(
        kept_q.view(torch.uint8), q[128:].view(torch.uint8)
    )
    assert torch.equal(kept_s, s[1:])
    with pytest.raises(ConfigError, match="cuts fp8 blocks"):
        reader.read_weight("w", box, torch.float32, keep_fp8=True)
    with pytest.raises(ConfigError, match="without their scales"):
        reader.read_weight("bare", None, torch.float32)


def test_place_model_never_casts_float8_weights():
    """The old rule cast every floating parameter to ``model.dtype``: an fp8 weight lost
    its block scales without an error (garbage logits on a GPU)."""
    lin = torch.nn.Linear(4, 4)
    lin.weight.data = lin.weight.data.to(torch.float8_e4m3fn)
    lin.register_parameter("weight_scale_inv", torch.nn.Parameter(torch.ones(1, 1), False))
    with pytest.raises(ConfigError, match="block scales"):
        place_model(torch.nn.Sequential(lin), ModelConfig(device="cpu", dtype="float32"))
    assert lin.weight.dtype == torch.float8_e4m3fn


def test_lora_never_targets_scale_tensors():
    model, _ = tiny_model(n_routed_experts=4, hidden_size=64, moe_intermediate_size=32)
    scales = []
    for name, module in model.named_modules():
        if name.endswith("mlp.experts"):  # an fp8 experts module's 3-D block scales
            module.gate_up_proj_scale_inv = torch.nn.Parameter(torch.ones(4, 1, 1), False)
            scales.append(f"{name}.gate_up_proj_scale_inv")
    targets = resolve_lora_targets(model, None, target_experts=True)
    assert scales and targets.parameters
    assert not set(scales) & set(targets.parameters)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """The tiny DeepSeek-V3 (hidden 256, 8 experts) as a sharded float32 checkpoint, in
    DeepSeek's fp8 format, and the fp8 one's dequantized weights as a float32 one."""
    root = tmp_path_factory.mktemp("ckpt")
    model, tok = tiny_model()
    write_sharded(model, tok, root / "f32")
    dequantized = write_block_fp8(model, tok, root / "fp8")
    ref = root / "fp8_dequantized"
    shutil.copytree(root / "fp8", ref)
    for f in ref.glob("model*"):
        f.unlink()
    _save_shards(dequantized, ref, 3)
    config = json.loads((ref / "config.json").read_text())
    del config["quantization_config"]
    (ref / "config.json").write_text(json.dumps(config))
    return root


def _ids():
    return torch.randint(3, 200, (2, 12), generator=torch.Generator().manual_seed(0))


def test_a_meta_built_model_with_its_adapter_is_the_loaded_one(checkpoints):
    path = checkpoints / "f32"
    want = apply_lora(load_model(path)[0], LORA, seed=1)
    meta, _ = meta_model_and_tokenizer(path)
    assert all(p.is_meta for p in meta.parameters())
    got = apply_lora_on_meta(meta, LORA, seed=1)
    assert all(p.is_meta for p in got.parameters())  # nothing drawn, nothing allocated
    reader_before = CheckpointReader.process_bytes_read
    load_whole_model(got, CheckpointSource(str(path), torch.float32, CPU))
    read = CheckpointReader.process_bytes_read - reader_before
    a, b = adapter_state_dict(got), adapter_state_dict(want)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    stored = sum(t.dtype.itemsize * t.numel() for t in load_model(path)[0].state_dict().values())
    assert read <= stored  # every tensor once (rotary frequencies are not stored)
    assert local_bytes(got) == sum(
        t.numel() * t.element_size() for t in [*want.parameters(), *want.buffers()]
    )
    torch.testing.assert_close(
        got(input_ids=_ids()).logits, want(input_ids=_ids()).logits, atol=0, rtol=0
    )
    for (n1, b1), (n2, b2) in zip(got.named_buffers(), want.named_buffers(), strict=True):
        assert n1 == n2 and torch.equal(b1, b2)


def test_tied_embeddings_stay_tied(tmp_path):
    from agentgym.generation import build_preset, build_tokenizer, save_model

    tok = build_tokenizer()
    save_model(build_preset("tiny-qwen2", tok), tok, tmp_path)  # lm_head is embed_tokens
    meta, _ = meta_model_and_tokenizer(tmp_path)
    load_whole_model(meta, CheckpointSource(str(tmp_path), torch.float32, CPU))
    assert meta.lm_head.weight is meta.model.embed_tokens.weight
    want, _ = load_model(tmp_path)
    torch.testing.assert_close(meta(input_ids=_ids()).logits, want(input_ids=_ids()).logits)


def test_an_fp8_checkpoint_loads_with_its_scales(checkpoints):
    got, _ = build_model_and_tokenizer(ModelConfig(path=str(checkpoints / "fp8"), preset=None))
    want, _ = load_model(checkpoints / "fp8_dequantized")
    assert all(p.dtype == torch.float32 for p in got.parameters())
    torch.testing.assert_close(
        got(input_ids=_ids()).logits, want(input_ids=_ids()).logits, atol=0, rtol=0
    )
    original, _ = load_model(checkpoints / "f32")  # and fp8 is near the unquantized model
    gap = (got(input_ids=_ids()).logits - original(input_ids=_ids()).logits).abs().max()
    assert 0 < gap < 0.5


def test_fp8_experts_kept_quantized_compute_what_the_dequantized_ones_do(checkpoints):
    pytest.importorskip("torchao", reason="model.quantize needs torchao: pip install -e '.[quant]'")
    from agentgym.trainers.parallel import quantize_base
    from agentgym.trainers.parallel.quant import is_quantized, storage_bytes

    cfg = ModelConfig(path=str(checkpoints / "fp8"), preset=None, device="cpu", quantize="fp8")
    model, _ = build_on_meta(cfg, LORA, lora_seed=1, backend="none", mesh=False)
    quantize_base(model, "fp8", dense=False)  # the experts' LoRA on their fp8 stacks
    want = apply_lora(load_model(checkpoints / "fp8_dequantized")[0], LORA, seed=1)
    kept = {n: p for n, p in model.named_parameters() if is_quantized(p)}
    assert kept and all(".experts." in n for n in kept)  # dense weights dequantized
    reader = CheckpointReader(checkpoints / "fp8")
    first = next(n for n in kept if n.endswith("gate_up_proj"))
    layer = first.split("layers.")[1].split(".")[0]
    q, _ = reader.read_weight(
        f"model.layers.{layer}.mlp.experts.0.gate_proj.weight", None, torch.float32, keep_fp8=True
    )
    assert torch.equal(kept[first].qdata[0, : q.shape[0]].view(torch.uint8), q.view(torch.uint8))
    with torch.no_grad():  # a non-zero adapter, the same on both
        for (n, p), (_, p2) in zip(model.named_parameters(), want.named_parameters(), strict=True):
            if "lora_B" in n:
                p.normal_(std=0.05, generator=torch.Generator().manual_seed(len(n)))
                p2.copy_(p)
    a, b = model(input_ids=_ids()).logits, want(input_ids=_ids()).logits
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    a.square().mean().backward()
    b.square().mean().backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.requires_grad}
    expected = {n: p.grad for n, p in want.named_parameters() if p.requires_grad}
    assert grads.keys() == expected.keys()
    assert any(".experts." in n and g.abs().sum() > 0 for n, g in grads.items())
    for n in grads:
        torch.testing.assert_close(grads[n], expected[n], atol=1e-6, rtol=1e-4, msg=n)
    for t in kept.values():  # one byte a weight, plus a float32 scale per 128x128 block
        assert storage_bytes(t) < 0.26 * t.numel() * 4


@pytest.mark.gpu
def test_an_fp8_checkpoint_on_cuda_is_read_with_its_scales(checkpoints):
    """On a GPU transformers keeps its fp8 modules (float8 weights, scales beside them);
    the old ``place_model`` cast them to bf16 without the scales. Now that is refused, and
    agentgym's reader gives the dequantized model in bf16 on the GPU (the experts kept in
    fp8 with ``model.quantize: fp8``, when torchao is installed)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    from transformers import AutoModelForCausalLM

    cfg = ModelConfig(path=str(checkpoints / "fp8"), preset=None, device="cuda", dtype="bfloat16")
    try:
        theirs = AutoModelForCausalLM.from_pretrained(str(checkpoints / "fp8"))
    except Exception as e:  # transformers' fp8 needs its own kernels
        theirs = None
        print(f"transformers could not load the fp8 checkpoint: {e}")
    if theirs is not None and any(p.dtype == torch.float8_e4m3fn for p in theirs.parameters()):
        with pytest.raises(ConfigError, match="block scales"):
            place_model(theirs, cfg)
    want, _ = load_model(checkpoints / "fp8_dequantized")
    want = place_model(want, cfg)
    got = place_model(build_model_and_tokenizer(cfg)[0], cfg)
    ids = _ids().cuda()
    with torch.no_grad():
        a, b = got(input_ids=ids).logits.float(), want(input_ids=ids).logits.float()
    torch.testing.assert_close(a, b, atol=0, rtol=0)  # the same bf16 weights
    try:
        import torchao  # noqa: F401
    except ImportError:
        return
    from agentgym.trainers.parallel import quantize_base

    kept_cfg = ModelConfig(
        path=str(checkpoints / "fp8"), preset=None, device="cuda", dtype="bfloat16", quantize="fp8"
    )
    kept, _ = build_on_meta(kept_cfg, LORA, lora_seed=1, backend="nccl", mesh=False)
    quantize_base(kept, "fp8", dense=False)
    ref = apply_lora(want, LORA, seed=1)
    with torch.no_grad(), torch.autocast("cuda", dtype=torch.bfloat16):
        a, b = kept(input_ids=ids).logits.float(), ref(input_ids=ids).logits.float()
    torch.testing.assert_close(a, b, atol=2e-2, rtol=2e-2)
