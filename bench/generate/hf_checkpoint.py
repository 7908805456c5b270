"""A Hugging Face Llama checkpoint folder of random bf16 weights at one of
the decoder bench's shapes, with a byte-level BPE tokenizer trained by the
`tokenizers` library on the repository's docs/ (GPT-2 style, 4000 tokens):
what `coda generate --checkpoint FOLDER --device gpu --stats` imports to
stream text at the bench's speeds (the text is the random model's).

    python3 bench/generate/hf_checkpoint.py --shape 1.1b --out FOLDER"""

import argparse
import glob
import os

from hf_generate import SHAPES


def tokenizer(path, docs):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=4000, min_frequency=2, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train(sorted(glob.glob(os.path.join(docs, "*.md"))), tr)
    tok.save(path)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="1.1b", choices=sorted(SHAPES))
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    import torch
    import transformers
    s = SHAPES[a.shape]
    cfg = transformers.LlamaConfig(vocab_size=s["vocab"], hidden_size=s["dim"], intermediate_size=s["ffn"],
                                   num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
                                   num_key_value_heads=s["kv_heads"], max_position_embeddings=8192,
                                   rms_norm_eps=1e-5, rope_theta=500000.0, tie_word_embeddings=False,
                                   bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = transformers.LlamaForCausalLM(cfg).to(torch.bfloat16)
    model.save_pretrained(a.out, safe_serialization=True)
    tokenizer(os.path.join(a.out, "tokenizer.json"),
              os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs"))
    print("wrote", a.out)


if __name__ == "__main__":
    main()
