"""An in-process tokenizer for the tiny models (no hub download needed).

:func:`build_tokenizer` makes a byte-level BPE tokenizer with the ``tokenizers`` library
and wraps it in a ``PreTrainedTokenizerFast`` with a chat template, so it saves and
loads like any Hugging Face tokenizer (``save_pretrained`` / ``AutoTokenizer``).

* Without a corpus it is a plain byte-level tokenizer: 256 byte symbols plus the special
  tokens, one token per character of ASCII text. Any text round-trips.
* With a corpus (for example the prompts and worked solutions of the training envs) BPE
  merges are learned up to ``vocab_size``; frequent words become single tokens, so the
  same text takes fewer tokens (faster generation). Digits are always split one per
  token so that numbers stay learnable.

Chat format (special tokens are single tokens)::

    <|system|>...<|end|><|user|>...<|end|><|assistant|>...<|end|>

``<|end|>`` is the end-of-sequence token: a reply ends with it.
"""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

from agentgym import ConfigError, Message, to_openai

PAD, EOS, UNK = "<|pad|>", "<|end|>", "<|unk|>"
ROLE_TOKENS = ("<|system|>", "<|user|>", "<|assistant|>")
SPECIAL_TOKENS = (PAD, EOS, UNK, *ROLE_TOKENS)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def build_tokenizer(corpus: Iterable[str] | None = None, vocab_size: int | None = None) -> Any:
    """A byte-level BPE ``PreTrainedTokenizerFast`` with agentgym's chat template.

    Args:
        corpus: texts to learn merges from (``None``: no merges, one token per byte).
        vocab_size: total vocabulary size including the 256 byte symbols and the special
            tokens; required with a corpus, ignored without one.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    base_size = len(alphabet) + len(SPECIAL_TOKENS)
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    if corpus is None:
        size = base_size
    else:
        if vocab_size is None or vocab_size < base_size:
            raise ConfigError(
                f"tokenizer vocab_size must be >= {base_size} (bytes + special tokens) when "
                f"learning merges from a corpus; got {vocab_size}."
            )
        size = vocab_size
    trainer = trainers.BpeTrainer(
        vocab_size=size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=alphabet,
        show_progress=False,
    )
    tok.train_from_iterator(list(corpus) if corpus is not None else [""], trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=PAD,
        eos_token=EOS,
        unk_token=UNK,
        additional_special_tokens=list(ROLE_TOKENS),
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.padding_side = "left"
    return fast


#: prompts remembered per tokenizer by :func:`encode_prompt`
PROMPT_CACHE_SIZE = 4096
_prompt_caches: weakref.WeakKeyDictionary[Any, OrderedDict[Any, tuple[int, ...]]] = (
    weakref.WeakKeyDictionary()
)
_prompt_lock = threading.Lock()


def encode_prompt(tokenizer: Any, messages: Sequence[Message]) -> list[int]:
    """Token ids of a chat prompt, ending with the assistant header (generation prompt).

    The rollout engine and the trainer both call this, so the prompt a completion was
    sampled from is exactly the prompt it is trained with. The last
    :data:`PROMPT_CACHE_SIZE` prompts of each tokenizer are remembered (keyed by the
    messages and the chat template), so the trainer's encoding of a turn it just
    generated costs a lookup.
    """
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        raise ConfigError(
            "The tokenizer has no chat template; agentgym needs one to turn observations "
            "(message lists) into prompts. Set tokenizer.chat_template (a Jinja string) "
            "and save it with the model."
        )
    key = (template, tuple(messages))
    try:
        with _prompt_lock:
            cache = _prompt_caches.setdefault(tokenizer, OrderedDict())
            hit = cache.get(key)
            if hit is not None:
                cache.move_to_end(key)
                return list(hit)
    except TypeError:  # a tokenizer that cannot be weakly referenced: no cache
        cache = None
    text = tokenizer.apply_chat_template(
        to_openai(messages), add_generation_prompt=True, tokenize=False
    )
    ids = tuple(tokenizer(text, add_special_tokens=False)["input_ids"])
    if cache is not None:
        with _prompt_lock:
            cache[key] = ids
            if len(cache) > PROMPT_CACHE_SIZE:
                cache.popitem(last=False)
    return list(ids)


def encode_completion(tokenizer: Any, text: str) -> list[int]:
    """Token ids of an assistant reply followed by the end-of-sequence token (for SFT)."""
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if tokenizer.eos_token_id is None:
        raise ConfigError("The tokenizer has no eos_token; set one so replies can end.")
    return [*ids, int(tokenizer.eos_token_id)]
