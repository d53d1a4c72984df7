"""TEST DOUBLE of habana_frameworks.torch.hpu.graphs.wrap_in_hpu_graph (records the call)."""

WRAPPED: list = []


def wrap_in_hpu_graph(module, asynchronous=False, disable_tensor_cache=False, max_graphs=None):
    WRAPPED.append(module)
    module.wrapped_in_hpu_graph = True
    return module
