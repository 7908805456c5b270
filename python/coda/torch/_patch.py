"""The entry points that patch a Hugging Face model to run on the ops
(coda._hf_llama, coda._hf_gpt2, coda._hf_gemma3, imported on call)."""


def apply_to_llama(model, keep_logits=False):
    """Patches a transformers LlamaForCausalLM in place so that its decoder
    layers, final norm, LM head and loss run through these ops (see
    coda._hf_llama); returns the model. keep_logits: the loss keeps the
    logits for its backward (llama_lm_head_loss)."""
    from .._hf_llama import apply_to_llama as apply

    return apply(model, keep_logits=keep_logits)


def apply_to_qwen3(model, keep_logits=False):
    """Patches a transformers Qwen3ForCausalLM in place, as apply_to_llama a
    Llama, with the QK-norm in the qkv op (qwen3_qkv_norm_rope; see
    coda._hf_llama); returns the model."""
    from .._hf_llama import apply_to_qwen3 as apply

    return apply(model, keep_logits=keep_logits)


def apply_to_gpt2(model, keep_logits=False):
    """Patches a transformers GPT2LMHeadModel in place so that its blocks,
    final LayerNorm, head and loss run through the GPT-2 ops (see
    coda._hf_gpt2); returns the model. keep_logits: the loss keeps the
    logits for its backward (gpt2_lm_head_loss)."""
    from .._hf_gpt2 import apply_to_gpt2 as apply

    return apply(model, keep_logits=keep_logits)


def apply_to_gemma3(model, keep_logits=False):
    """Patches a transformers Gemma3ForCausalLM (the text model) in place so
    that its decoder layers, final norm, LM head, soft cap and loss run
    through the coda ops (see coda._hf_gemma3); returns the model."""
    from .._hf_gemma3 import apply_to_gemma3 as apply

    return apply(model, keep_logits=keep_logits)
