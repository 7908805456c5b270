#!/usr/bin/env python3
"""Trains a small GPT-2 style byte-level BPE tokenizer with the `tokenizers`
package on a text file and saves its tokenizer.json (with an EOS token).

    make_bpe_tokenizer.py CORPUS_TXT OUT_JSON VOCAB_SIZE
"""
import sys

try:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
except ImportError:
    sys.stderr.write("make_bpe_tokenizer.py: FAILED: the Python package `tokenizers` is not "
                     "installed (scripts/install-deps.sh installs it)\n")
    sys.exit(1)


def main(argv):
    if len(argv) != 4:
        sys.stderr.write(__doc__)
        return 2
    with open(argv[1], encoding="utf-8") as f:
        lines = f.read().splitlines()
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=int(argv[3]), min_frequency=2,
                                  special_tokens=["<|endoftext|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer)
    tok.save(argv[2])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
