"""The IR: values, nodes, the graph and its builder (the primitives' shape rules)."""
