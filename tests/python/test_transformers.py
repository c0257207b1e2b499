"""A transformers Llama model with attn_implementation="ringpack" against its own sdpa attention on
packed rows: equal loss and gradients."""

import pytest
import torch

transformers = pytest.importorskip("transformers")

import ringpack.transformers as rpt  # noqa: E402


def packed_batch(lengths, vocab, seed):
    gen = torch.Generator().manual_seed(seed)
    seq = sum(lengths)
    input_ids = torch.randint(0, vocab, (1, seq), generator=gen)
    position_ids = torch.cat([torch.arange(n) for n in lengths]).unsqueeze(0)
    labels = input_ids.clone()
    starts = torch.cumsum(torch.tensor([0] + lengths[:-1]), 0)
    labels[0, starts] = -100  # no prediction across a document boundary
    return input_ids, position_ids, labels


def tiny_llama(attn_implementation):
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=256)
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(
        config, attn_implementation=attn_implementation, dtype=torch.float32)


def loss_and_grads(model, input_ids, position_ids, labels, **extra):
    model.zero_grad()
    loss = model(input_ids=input_ids, position_ids=position_ids, labels=labels, use_cache=False,
                 **extra).loss
    loss.backward()
    return loss.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


@pytest.mark.parametrize("explicit_segments", [False, True])
def test_llama_loss_and_gradients_equal_sdpa(explicit_segments):
    name = rpt.register()
    lengths = [13, 40, 5, 30, 8]
    input_ids, position_ids, labels = packed_batch(lengths, 128, seed=2)
    reference = tiny_llama("sdpa")
    ours = tiny_llama(name)
    ours.load_state_dict(reference.state_dict())
    extra = {}
    if explicit_segments:
        extra["segment_ids"] = torch.cat(
            [torch.full((n,), i + 1, dtype=torch.int32) for i, n in enumerate(lengths)])[None]
    want_loss, want_grads = loss_and_grads(reference, input_ids, position_ids, labels)
    got_loss, got_grads = loss_and_grads(ours, input_ids, position_ids, labels, **extra)
    torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-5)
    for key, want in want_grads.items():
        torch.testing.assert_close(got_grads[key], want, rtol=1e-4, atol=1e-5, msg=key)


def test_documents_are_isolated():
    """Changing one document's tokens changes no other document's logits."""
    name = rpt.register()
    lengths = [20, 20]
    input_ids, position_ids, _ = packed_batch(lengths, 128, seed=3)
    model = tiny_llama(name)
    with torch.no_grad():
        before = model(input_ids=input_ids, position_ids=position_ids).logits
        changed = input_ids.clone()
        changed[0, 25:] = (changed[0, 25:] + 1) % 128
        after = model(input_ids=changed, position_ids=position_ids).logits
    torch.testing.assert_close(after[0, :20], before[0, :20], rtol=0, atol=0)
    assert not torch.allclose(after[0, 25:], before[0, 25:])
