"""Build a tiny causal LM directory that a real ``vllm serve`` can load (no download).

Runs inside the vLLM environment (it needs ``transformers`` and ``tokenizers``, which
vLLM brings). The model has random weights — served with ``--load-format dummy`` it
needs none on disk — and a byte-level BPE tokenizer trained here in seconds on generated
text, so prompts, token counts, streaming and ``/metrics`` behave as with a real model.
The output is deterministic for a given ``--seed``.

    python make_tiny_model.py OUT_DIR [--arch llama|qwen2|qwen3_moe] [--vocab-size 4096]

``qwen3_moe`` is a mixture of experts (Qwen3-MoE's architecture, as Qwen3-30B-A3B):
:data:`TINY_EXPERTS` experts of width 256, two per token, in every layer.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

CHAT_TEMPLATE = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"]
TINY_EXPERTS = 4
ARCHITECTURES = {"llama": "LlamaForCausalLM", "qwen2": "Qwen2ForCausalLM",
                 "qwen3_moe": "Qwen3MoeForCausalLM"}


def corpus(seed: int, lines: int = 20_000) -> list[str]:
    """Generated text: English-like words and syllable words (as slotune's datasets use)."""
    rng = random.Random(seed)
    consonants, vowels = "bdfghjklmnprstvz", "aeiou"
    syllables = [c + v for c in consonants for v in vowels]
    common = ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was",
              "on", "be", "by", "this", "are", "or", "at", "from", "which", "can", "have",
              "an", "not", "has", "but", "all", "were", "when", "there", "more", "one",
              "their", "also", "been", "model", "token", "request", "latency", "server",
              "cache", "batch", "prefill", "decode", "memory"]
    out = []
    for _ in range(lines):
        words = []
        for _ in range(rng.randint(6, 24)):
            if rng.random() < 0.5:
                words.append(rng.choice(common))
            else:
                words.append("".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))))
        out.append(" ".join(words) + rng.choice([".", ",", "?", "!"]))
    return out


def build(out: Path, arch: str, vocab_size: int, seed: int, max_len: int) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import AutoConfig, PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(corpus(seed), trainer=trainer)
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", model_max_length=max_len)
    fast.chat_template = CHAT_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)

    experts = {} if arch != "qwen3_moe" else {
        "num_experts": TINY_EXPERTS, "num_experts_per_tok": 2, "moe_intermediate_size": 256,
        "decoder_sparse_step": 1, "mlp_only_layers": [], "head_dim": 64,
        "norm_topk_prob": True}
    config = AutoConfig.for_model(
        arch,
        architectures=[ARCHITECTURES[arch]],
        **experts,
        vocab_size=len(fast),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_len,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        torch_dtype="bfloat16",
        tie_word_embeddings=False,
    )
    config.save_pretrained(out)
    (out / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": fast.bos_token_id, "eos_token_id": fast.eos_token_id}, indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="directory to write the model into")
    parser.add_argument("--arch", choices=sorted(ARCHITECTURES), default="llama")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--max-model-len", type=int, default=2048)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    build(args.out, args.arch, args.vocab_size, args.seed, args.max_model_len)
    print(f"tiny {args.arch} model written to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
