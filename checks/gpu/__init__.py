"""GPU node health at DGX depth: nvidia-smi's query, XIDs, NVLink, Fabric Manager, InfiniBand, DCGM, NHC.

Each module holds the shell text of its probe (a section of the node's one probe script), a pure parser of
that section's output to typed values, and judges turning those values and the desired state's expectations
into `Item`s. Faults are items whose message starts with `gpu ` (`gpu 3 xid 79 (fallen off the bus)`).
"""
