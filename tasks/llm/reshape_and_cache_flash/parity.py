"""llm/reshape_and_cache_flash's parity anchor: vLLM reshape_and_cache_flash as a PyTorch
composite (index_copy_ of the valid slots).

Signature and contract: tasks/llm/rms_norm/parity.py.
"""


def reshape_and_cache_flash(torch, t, s, sym):
    slots = t["slot_mapping"]
    valid = slots >= 0
    kc, vc = t["key_cache"], t["value_cache"]
    flat_k = kc.view(-1, *kc.shape[2:])
    flat_v = vc.view(-1, *vc.shape[2:])
    idx = slots[valid]
    flat_k.index_copy_(0, idx, t["key"][valid])
    flat_v.index_copy_(0, idx, t["value"][valid])
