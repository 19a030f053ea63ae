"""A tiny causal language model and its tokenizer, built in code (no hub
download): a byte-level BPE tokenizer trained on a few sentences and a
1-layer `Qwen2Config` model, small enough that TRL's GRPO and a plain
`Trainer` run a few steps on CPU in seconds. For the transformers/TRL tests
and bench."""

from __future__ import annotations

from typing import Any

CORPUS = ["count to ten: one two three four five six seven eight nine ten", "the quick brown fox jumps over the lazy dog"]
PROMPTS = ["count to ten:", "the quick brown"]


def tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    special = ["<unk>", "<pad>", "<eos>"]
    bpe.train_from_iterator(CORPUS * 10, trainers.BpeTrainer(vocab_size=300, special_tokens=special, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>", pad_token="<pad>", eos_token="<eos>")


def model(tok: Any, seed: int = 0) -> Any:
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        max_position_embeddings=64, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id, bos_token_id=tok.eos_token_id,
    )  # fmt: skip
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


def reward_length(completions: list[str], **kwargs: Any) -> list[float]:
    """A GRPO reward: completions of ten characters are best."""
    return [float(-abs(10 - len(completion))) for completion in completions]


def text_dataset(tok: Any, rows: int = 16) -> Any:
    """The corpus tokenized for causal-LM training (labels = inputs)."""
    from datasets import Dataset

    encoded = tok((CORPUS * rows)[:rows], truncation=True, max_length=24, padding="max_length")
    return Dataset.from_dict({**encoded, "labels": [list(ids) for ids in encoded["input_ids"]]})
