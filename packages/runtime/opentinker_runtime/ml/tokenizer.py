"""The byte-level tokenizer of the builtin models: 256 byte tokens plus four specials, ChatML.

Token id b (0..255) is the byte b, so any UTF-8 text round-trips and the vocabulary needs no
training data; ids 256..259 are <|pad|> <|bos|> <|im_start|> <|im_end|> (eos). Built in code,
offline and deterministically; `save_pretrained` writes a directory `AutoTokenizer` loads.
"""

from __future__ import annotations

from functools import cache

from tokenizers import AddedToken, Tokenizer, decoders, models
from tokenizers.pre_tokenizers import ByteLevel
from transformers import PreTrainedTokenizerFast

PAD_TOKEN = "<|pad|>"
BOS_TOKEN = "<|bos|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, IM_START, IM_END)
BYTE_VOCAB_SIZE = 256
VOCAB_SIZE = BYTE_VOCAB_SIZE + len(SPECIAL_TOKENS)
GENERATION_PROMPT = f"{IM_START}assistant\n"
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '" + IM_START + "' + message['role'] + '\\n' + message['content'] + '" + IM_END + "' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '" + IM_START + "assistant\\n' }}{% endif %}"
)


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """A fresh byte-level tokenizer with the ChatML chat template (eos = <|im_end|>)."""
    return PreTrainedTokenizerFast(
        tokenizer_object=_byte_level_tokenizer(), pad_token=PAD_TOKEN, bos_token=BOS_TOKEN,
        eos_token=IM_END, chat_template=CHATML_TEMPLATE)


def _byte_level_tokenizer() -> Tokenizer:
    """A BPE model with no merges over the 256 ByteLevel symbols, id = byte value."""
    symbols = byte_symbols()
    vocab = {symbols[byte]: byte for byte in range(BYTE_VOCAB_SIZE)}
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tokenizer.pre_tokenizer = ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False)
                                  for token in SPECIAL_TOKENS])
    return tokenizer


@cache
def byte_symbols() -> dict[int, str]:
    """GPT-2's reversible byte -> printable unicode symbol map (what ByteLevel emits)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1),
                 *range(ord("®"), ord("ÿ") + 1)]
    others = [byte for byte in range(BYTE_VOCAB_SIZE) if byte not in printable]
    mapping = {byte: chr(byte) for byte in printable}
    mapping.update({byte: chr(BYTE_VOCAB_SIZE + index) for index, byte in enumerate(others)})
    return mapping
