"""The node-side fence check as Python source, shared by the file writer, the fenced command runner and the fact
agent (reconciler/engine/fence.py explains fencing). No imports here: the fact script embeds it."""

# Plain Python source, no %-formatting in it.
FENCE_CHECK_SOURCE = r'''
def fence_check(fence):
    # the highest epoch this node has seen, under a lock held until the caller is done; None when allowed
    import fcntl, json, os, time
    fdir = fence.get("dir") or "/var/lib/reconciler"
    os.makedirs(fdir, mode=0o700, exist_ok=True)
    lock = open(os.path.join(fdir, "fence.lock"), "a")
    fcntl.flock(lock, fcntl.LOCK_EX)
    state = os.path.join(fdir, "fence.json")
    try:
        with open(state) as fh: seen = json.load(fh)
    except (OSError, ValueError): seen = {"epoch": -1, "holder": None}
    epoch = int(fence["epoch"])
    if epoch < int(seen.get("epoch", -1)):
        return lock, "fenced: epoch %d of %s is older than epoch %d of %s, seen on this node" % (
            epoch, fence.get("holder"), int(seen["epoch"]), seen.get("holder"))
    if epoch > int(seen.get("epoch", -1)) or seen.get("holder") != fence.get("holder"):
        tmp = state + ".tmp"
        with open(tmp, "w") as fh:
            json.dump({"epoch": epoch, "holder": fence.get("holder"), "at": time.time()}, fh)
            fh.flush(); os.fsync(fh.fileno())
        os.rename(tmp, state)
        fd = os.open(fdir, os.O_RDONLY)
        try: os.fsync(fd)
        finally: os.close(fd)
    return lock, None
'''
