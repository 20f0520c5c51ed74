# parity_gdb.py - gdb commands for stepping through a parallel training
# step of parity (README.md, "Stepping through a step in gdb").
#
#   (gdb) source ref/debug/parity_gdb.py     (or let the repository's .gdbinit do it)
#   (gdb) parity devices          every device: grid coordinates, thread, step,
#                                 pass, unit, microbatch, what it waits for
#   (gdb) parity where            every device's wait point: the collective or
#                                 transfer, its group, sequence number, and the
#                                 line of parity that called it
#   (gdb) parity tensor EXPR [NAME]   a parameter: global shape, placement, this
#                                 device's slice, first values. EXPR is a
#                                 param_info_t (or pointer), or a gpt_t * with
#                                 NAME (e.g. layers.0.mlp.dense_4h_to_h.weight)
#                                 or an index into its parameter table
#   (gdb) parity placement EXPR   a placement_t / param_info_t: how the global
#                                 tensor is cut, and the block of every device
#   (gdb) parity break-collective DEVICE   stop when DEVICE enters a collective
#                                 or a point-to-point wait
#   (gdb) parity finish-collective         run the selected device's thread
#                                 until it leaves the collective it is in
#   (gdb) print g->table.info[3]  pretty-printed: placement_t and param_info_t
#                                 print in one line (global shape, cuts)
#
# Everything is read from the process's memory, nothing is called in it:
# the commands work on a core file too, and never disturb the run. The
# tables read are parity_debug (include/parity/runtime.h, device_debug.c)
# and coll_activity (ref/coll/coll_impl.h, coll_wait.c). Run with
# --step-through (or PARITY_STEP_THROUGH=1) so that one device runs at a
# time and stopping it stops the step.

import gdb
import gdb.printing

AXES = ("tp", "tp2", "tp3", "cp", "ep", "dp", "pp")
PASSES = ("setup", "forward", "backward", "gradient reduction", "optimizer", "finished")


def _val(expr):
    return gdb.parse_and_eval(expr)


def _int(v):
    return int(v.cast(gdb.lookup_type("long long")))


def world():
    try:
        return _int(_val("parity_debug.world"))
    except gdb.error:
        raise gdb.GdbError("parity: no parity_debug table here (is this a parity program "
                           "built with -g, and is a run in progress?)")


def dev(r):
    return _val("parity_debug.dev[%d]" % r)


def coords(r):
    d = dev(r)
    if not _int(d["has_coords"]):
        return None
    return [_int(d["coord"][a]) for a in range(len(AXES))]


def grid_sizes():
    return [_int(_val("parity_debug.grid[%d]" % a)) for a in range(len(AXES))]


def coords_text(r):
    c = coords(r)
    if c is None:
        return "(no grid)"
    sizes = grid_sizes()  # tp's sub-axes only where the mode has them (2-D, 2.5-D, 3-D)
    return ", ".join("%s %d" % (AXES[a], c[a]) for a in range(len(AXES))
                     if AXES[a] not in ("tp2", "tp3") or sizes[a] > 1)


def device_of_thread(thread):
    """The device rank whose thread this is, or -1 (helper threads, main)."""
    lwp = thread.ptid[1]
    for r in range(world()):
        if _int(dev(r)["tid"]) == lwp:
            return r
    return -1


def thread_of_device(r):
    tid = _int(dev(r)["tid"])
    for t in gdb.selected_inferior().threads():
        if t.ptid[1] == tid:
            return t
    return None


def selected_device():
    t = gdb.selected_thread()
    r = device_of_thread(t) if t else -1
    if r < 0:
        raise gdb.GdbError("parity: the selected thread is not a device thread "
                           "(switch with `thread N`; `parity devices` lists them)")
    return r


def kind_name(k):
    try:
        s = str(_val("(coll_kind_t)%d" % k))
    except gdb.error:
        return "collective %d" % k
    return s.replace("COLL_KIND_", "").lower().replace("_", "-")


def waits_for(r):
    """(text, in_collective): the call device r waits in, from coll_activity."""
    a = _val("coll_activity[%d]" % r)
    g = a["group"]
    if _int(g) == 0:
        return "", False
    kind = _int(a["kind"])
    name = g["name"].string()
    n = _int(g["n"])
    me = -1
    for i in range(n):
        if _int(g["ranks"][i]) == r:
            me = i
    kn = kind_name(kind)
    if kn in ("send", "recv"):
        peer = _int(a["peer"])
        return ("%s %s rank %d (world %d) tag %d on group '%s' (rank %d of %d)" %
                (kn, "to" if kn == "send" else "from", peer, _int(g["ranks"][peer]),
                 _int(a["tag"]), name, me, n)), True
    return ("%s call #%d of group '%s' (rank %d of %d)" %
            (kn, _int(a["seq"]), name, me, n)), True


def state_text(r):
    d = dev(r)
    baton = _int(_val("parity_debug.baton"))
    if _int(d["tid"]) == 0:
        return "not started"
    if _int(d["pass"]) == PASSES.index("finished"):
        return "finished"
    if baton == r:
        return "RUNNING (holds the baton)"
    if _int(d["blocked"]):
        return "waiting for the baton"
    if baton >= 0:
        return "runnable (next turn)"
    return "running"


def doing_text(r):
    d = dev(r)
    p = _int(d["pass"])
    text = PASSES[p] if 0 <= p < len(PASSES) else "?"
    unit, mb, chunk, step = (_int(d["unit"]), _int(d["mb"]), _int(d["chunk"]), _int(d["step"]))
    if step >= 0:
        text = "step %d %s" % (step, "start" if p == 0 else text)
    if unit >= 0 and p in (1, 2):
        text += " unit %d" % unit
    if mb >= 0 and p in (1, 2):
        text += " mb %d" % mb
        if chunk > 0:
            text += " chunk %d" % chunk
    return text


class Parity(gdb.Command):
    """parity: commands for stepping through a parity run (devices, where, tensor,
placement, break-collective, finish-collective). `help parity COMMAND` for each."""

    def __init__(self):
        super().__init__("parity", gdb.COMMAND_USER, prefix=True)


class Devices(gdb.Command):
    """parity devices: every device of the run, with its grid coordinates (tp, cp, ep, dp,
pp), gdb thread, step, pass, unit, microbatch, turn (step-through) and the call it waits in."""

    def __init__(self):
        super().__init__("parity devices", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        n = world()
        sizes = grid_sizes()
        print("%d devices, grid %s%s" % (n, " x ".join("%s %d" % (AXES[a], sizes[a])
                                                        for a in range(len(AXES))),
                                          ", step-through" if _int(_val("parity_debug.baton")) >= 0
                                          else ""))
        for r in range(n):
            t = thread_of_device(r)
            w, _ = waits_for(r)
            print("  device %d (%s) thread %s: %s; %s%s" %
                  (r, coords_text(r), t.num if t else "-", doing_text(r), state_text(r),
                   "; waits in " + w if w else ""))


def caller_line(thread):
    """The first frame outside the collectives and the runtime: who called them."""
    if thread is None:
        return ""
    keep = gdb.selected_thread()
    keep_frame = gdb.selected_frame() if keep else None
    try:
        thread.switch()
        f = gdb.newest_frame()
        inside = False
        while f is not None:
            name = f.name() or ""
            if name.startswith(("coll_", "shm_run", "net_", "step_", "ring_", "direct_", "open_",
                                "wait_slow", "await_baton", "hand_over", "goal_reached")):
                inside = True
            elif inside or name.startswith(("dp_", "gpt_", "forward", "backward")):
                sal = f.find_sal()
                where = "%s:%d" % (sal.symtab.filename, sal.line) if sal.symtab else "?"
                return "%s (%s)" % (name, where)
            f = f.older()
        return ""
    finally:
        if keep:
            keep.switch()
            if keep_frame is not None and keep_frame.is_valid():
                keep_frame.select()


class Where(gdb.Command):
    """parity where: each device's wait point (the collective or transfer, its group and
sequence number) and the line of parity that called it."""

    def __init__(self):
        super().__init__("parity where", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        for r in range(world()):
            w, inside = waits_for(r)
            who = caller_line(thread_of_device(r)) if inside else ""
            print("  device %d (%s): %s%s" % (r, coords_text(r),
                                              w if inside else "not in a collective (" +
                                              state_text(r) + ")",
                                              "\n      called from " + who if who else ""))


def placement_of(v):
    t = v.type.strip_typedefs()
    if t.code == gdb.TYPE_CODE_PTR:
        v = v.dereference()
        t = v.type.strip_typedefs()
    fields = [f.name for f in t.fields()]
    if "pl" in fields:
        return v["pl"], v
    if "cut" in fields and "shape" in fields:
        return v, None
    raise gdb.GdbError("parity: %s is neither a placement_t nor a param_info_t" % v.type)


def placement_text(pl):
    ndim = _int(pl["ndim"])
    shape = [_int(pl["shape"][d]) for d in range(ndim)]
    cuts = []
    for k in range(_int(pl["ncuts"])):
        c = pl["cut"][k]
        cuts.append("axis %d split over %s (align %d)" %
                    (_int(c["axis"]), AXES[_int(c["over"])], _int(c["align"])))
    partial = [AXES[a] for a in range(len(AXES)) if _int(pl["partial"]) >> a & 1]
    text = "global shape [%s]; %s" % (", ".join(map(str, shape)),
                                      "; ".join(cuts) if cuts else "replicated")
    if partial:
        text += "; partial sums over " + ", ".join(partial)
    return text, shape


def block_of(pl, shape, c, sizes):
    lo = [0] * len(shape)
    ext = list(shape)
    for k in range(_int(pl["ncuts"])):
        cut = pl["cut"][k]
        axis, over = _int(cut["axis"]), _int(cut["over"])
        ext[axis] //= max(sizes[over], 1)
        lo[axis] += c[over] * ext[axis]
    return "[" + ", ".join("%d:%d" % (lo[d], lo[d] + ext[d]) for d in range(len(shape))) + "]"


class Placement(gdb.Command):
    """parity placement EXPR: a placement_t or param_info_t: the global shape, how it is cut
over the grid's axes, and the block every device holds."""

    def __init__(self):
        super().__init__("parity placement", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        if not arg.strip():
            raise gdb.GdbError("usage: parity placement EXPR")
        pl, _ = placement_of(_val(arg))
        text, shape = placement_text(pl)
        print(text)
        sizes = grid_sizes()
        for r in range(world()):
            c = coords(r)
            if c is not None:
                print("  device %d (%s): %s" % (r, coords_text(r), block_of(pl, shape, c, sizes)))


def find_param(g, key):
    table = g["table"]
    count = _int(table["count"])
    if key.isdigit():
        i = int(key)
        if i >= count:
            raise gdb.GdbError("parity: index %d: the table has %d tensors" % (i, count))
        return i
    for i in range(count):
        if table["info"][i]["name"].string() == key:
            return i
    raise gdb.GdbError("parity: no tensor '%s' in this model's table (%d tensors)" % (key, count))


class Tensor(gdb.Command):
    """parity tensor EXPR [NAME|INDEX] [N]: a parameter tensor: global shape, placement,
this device's slice and its first N values (default 8). EXPR: a param_info_t (or pointer),
or a gpt_t * with the tensor's NAME or INDEX."""

    def __init__(self):
        super().__init__("parity tensor", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        args = gdb.string_to_argv(arg)
        if not args:
            raise gdb.GdbError("usage: parity tensor EXPR [NAME|INDEX] [N]")
        v = _val(args[0])
        t = v.type.strip_typedefs()
        data = None
        if t.code == gdb.TYPE_CODE_PTR and "table" in [f.name for f in t.target().strip_typedefs().fields()]:
            if len(args) < 2:
                raise gdb.GdbError("parity tensor: %s is a model: name a tensor too" % args[0])
            g = v.dereference()
            i = find_param(g, args[1])
            info = g["table"]["info"][i]
            ptr = g["param_ptr"]
            data = ptr[i] if _int(ptr) != 0 else None
            if (data is None or _int(data) == 0) and _int(g["params"]) != 0:
                data = g["params"] + _int(info["offset"])
            count = int(args[2]) if len(args) > 2 else 8
        else:
            info = v.dereference() if t.code == gdb.TYPE_CODE_PTR else v
            count = int(args[1]) if len(args) > 1 else 8
        pl, _ = placement_of(info)
        text, shape = placement_text(pl)
        ndim = _int(info["ndim"])
        local = [_int(info["shape"][d]) for d in range(ndim)]
        print("%s: %s" % (info["name"].string(), text))
        r = -1
        try:
            r = selected_device()
        except gdb.GdbError:
            pass
        if r >= 0 and coords(r) is not None:
            print("  this device %d (%s) holds %s, local shape [%s]" %
                  (r, coords_text(r), block_of(pl, shape, coords(r), grid_sizes()),
                   ", ".join(map(str, local))))
        else:
            print("  local shape [%s]" % ", ".join(map(str, local)))
        if not _int(info["held"]):
            print("  not held here (another pipeline stage holds it)")
        elif data is not None and _int(data) != 0:
            n = min(count, _int(info["numel"]))
            vals = [float(data[k]) for k in range(n)]
            print("  first %d values: %s" % (n, " ".join("%.9g" % x for x in vals)))


class _Entered(gdb.FinishBreakpoint):
    """Stops once coll_activity_enter has recorded the call: `parity where` then shows it."""

    def stop(self):
        return True

    def out_of_scope(self):
        pass


class _Enter(gdb.Breakpoint):
    def __init__(self, device, kind):
        super().__init__("coll_activity_enter", internal=False)
        self.device = device
        self.kind = kind

    def stop(self):
        if _int(gdb.selected_frame().read_var("world_rank")) != self.device:
            return False
        if self.kind and kind_name(_int(gdb.selected_frame().read_var("kind"))) != self.kind:
            return False
        _Entered(gdb.newest_frame(), internal=False)
        return False


class BreakCollective(gdb.Command):
    """parity break-collective DEVICE [KIND]: stop when device DEVICE has entered a
collective (of KIND: all-reduce, reduce-scatter, all-gather, broadcast, all-to-all,
barrier, send, recv, ...) or a point-to-point wait, just after coll_activity_enter
recorded it, so `parity where` shows the call. `delete` removes it like any breakpoint."""

    def __init__(self):
        super().__init__("parity break-collective", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        args = gdb.string_to_argv(arg)
        if not 1 <= len(args) <= 2 or not args[0].isdigit():
            raise gdb.GdbError("usage: parity break-collective DEVICE [KIND]")
        n = world() if _int(_val("parity_debug.world")) else None
        if n is not None and int(args[0]) >= n:
            raise gdb.GdbError("parity: device %s: the run has devices 0 .. %d" % (args[0], n - 1))
        _Enter(int(args[0]), args[1] if len(args) > 1 else None)


class FinishCollective(gdb.Command):
    """parity finish-collective: run until the selected device leaves the collective it is
in (a temporary breakpoint on coll_activity_exit for its rank). In step-through mode
the other devices take their turns meanwhile, as the collective needs them."""

    def __init__(self):
        super().__init__("parity finish-collective", gdb.COMMAND_USER)

    def invoke(self, arg, from_tty):
        r = selected_device()
        gdb.execute("tbreak coll_activity_exit if world_rank == %d" % r)
        gdb.execute("continue")


class PlacementPrinter:
    """`print pl`: the placement in one line (global shape, cuts, partial sums)."""

    def __init__(self, val):
        self.val = val

    def to_string(self):
        return placement_text(self.val)[0]


class ParamInfoPrinter:
    """`print g->table.info[i]`: name, local shape and placement in one line."""

    def __init__(self, val):
        self.val = val

    def to_string(self):
        v = self.val
        ndim = _int(v["ndim"])
        local = ", ".join(str(_int(v["shape"][d])) for d in range(ndim))
        return "%s: local [%s] at offset %d; %s%s" % (
            v["name"].string(), local, _int(v["offset"]), placement_text(v["pl"])[0],
            "" if _int(v["held"]) else "; not held here")


def _printers():
    import gdb.printing
    pp = gdb.printing.RegexpCollectionPrettyPrinter("parity")
    pp.add_printer("placement_t", "^placement_t$", PlacementPrinter)
    pp.add_printer("param_info_t", "^param_info_t$", ParamInfoPrinter)
    return pp


gdb.printing.register_pretty_printer(gdb.current_objfile(), _printers(), replace=True)
Parity()
Devices()
Where()
Tensor()
Placement()
BreakCollective()
FinishCollective()
