"""Writes mutated specs for the differential run (linac-differential).

    mutate_specs.py --count N --seed S --out DIR SPEC...

Each mutant is one of the given specs (the examples) at new dimensions with
one to three mutations: gate ops swapped, operands swapped or substituted,
constants changed, strengths added, removed or replaced, decay sides
changed, the read moved or reading another state, its scale and normaliser
changed, transitions and pure ops added or removed, the yield changed.
Mutations know the kinds of values (scalar, key, value, state, matrix)
and mostly keep a spec well-typed, so that most mutants verify; the rest
test that the compiler rejects them with a diagnostic. The first line of a
mutant names its source and its mutations.
"""
import argparse
import os
import random
import re

UNARY = ["arith.negf", "math.exp", "math.exp2", "math.log", "math.log1p",
         "math.tanh", "math.absf", "math.sqrt", "linac.sigmoid",
         "linac.softplus"]
BINARY = ["arith.addf", "arith.subf", "arith.mulf", "arith.divf",
          "arith.maximumf", "arith.minimumf"]
TRANSITIONS = ["linac.decay", "linac.matrix_gate", "linac.erase",
               "linac.write"]
CONSTANTS = ["0.0", "1.0", "-1.0", "0.5", "2.0", "-0.0625", "-5.0", "3.0",
             "1.0e-03", "-0.25", "-20.0", "10.0"]
DIMS = [16, 16, 32, 32, 48, 64, 100, 8, 20]


def split_top(text):
    """Splits at commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        if c in "<([{":
            depth += 1
        elif c in ">)]}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    if text[start:].strip():
        parts.append(text[start:].strip())
    return parts


def use(name):
    return re.compile(r"%" + re.escape(name) + r"(?![\w])")


class Spec:
    """A spec as aliases, a header (state, inputs, params) and body ops."""

    def __init__(self, text):
        lines = [l for l in text.splitlines()
                 if l.strip() and not l.strip().startswith("//")]
        self.aliases = {}
        header, body = [], []
        for line in lines:
            m = re.match(r"\s*!(\w+)\s*=\s*(.*)$", line)
            if m and not header:
                self.aliases[m.group(1)] = m.group(2).strip()
            elif not header or not header[-1].rstrip().endswith("{"):
                header.append(line.strip())
            else:
                body.append(line.strip())
        head = " ".join(header)
        m = re.match(r"linac\.layer @(\w+)\((.*?)\)\s*inputs\((.*?)\)\s*"
                     r"(?:params\((.*?)\)\s*)?\{$", head)
        if not m:
            raise ValueError("unexpected layer header: " + head)
        self.name = m.group(1)
        self.state = self.parse_args(m.group(2))[0]
        self.inputs = self.parse_args(m.group(3))
        self.params = self.parse_args(m.group(4) or "")
        # Ops, each a line; a line not starting with % continues the last.
        self.ops = []
        for line in body:
            if line == "}":
                continue
            if line.startswith("%") or line.startswith("linac.yield"):
                self.ops.append(line)
            else:
                self.ops[-1] += " " + line
        self.yield_op = self.ops.pop()

    @staticmethod
    def parse_args(text):
        args = []
        for part in split_top(text):
            name, type_ = part.split(":", 1)
            args.append([name.strip()[1:], type_.strip()])
        return args

    def resolve(self, type_):
        return self.aliases.get(type_[1:], type_) if type_.startswith("!") else type_

    def kind(self, type_):
        t = self.resolve(type_.strip())
        if t == "f32":
            return "scalar"
        if "#linac.key" in t:
            return "key"
        if "#linac.value" in t:
            return "value"
        if "#linac.matrix" in t:
            return "matrix"
        if "linac.state" in t:
            return "state"
        return "other"

    def values(self):
        """(name, kind, index of the op defining it or -1), in body order."""
        out = [(self.state[0], "state", -1)]
        out += [(n, self.kind(t), -1) for n, t in self.inputs + self.params]
        for i, op in enumerate(self.ops):
            m = re.match(r"%(\w+) = (\S+)", op)
            if not m:
                continue
            name, opname = m.groups()
            if opname in TRANSITIONS:
                kind = "state"
            elif opname == "linac.read":
                kind = "value"
            elif opname in ("linac.dot", "linac.head_index"):
                kind = "scalar"
            else:
                kind = self.kind(op.rsplit(":", 1)[1])
            out.append((name, kind, i))
        return out

    def spelling(self, kind):
        """How a value of `kind` is written in types."""
        for alias, t in self.aliases.items():
            if self.kind("!" + alias) == kind:
                return "!" + alias
        if kind == "scalar":
            return "f32"
        if kind == "state":
            return self.state[1]
        for _, t in self.inputs:
            if self.kind(t) == kind:
                return t
        return None

    def text(self, comment):
        lines = [comment]
        lines += ["!%s = %s" % kv for kv in self.aliases.items()]
        lines.append("")
        head = "linac.layer @%s(%%%s : %s)\n    inputs(%s)" % (
            self.name, self.state[0], self.state[1],
            ", ".join("%%%s : %s" % (n, t) for n, t in self.inputs))
        if self.params:
            head += "\n    params(%s)" % ", ".join(
                "%%%s : %s" % (n, t) for n, t in self.params)
        lines.append(head + " {")
        lines += ["  " + op for op in self.ops + [self.yield_op]]
        lines.append("}")
        return "\n".join(lines) + "\n"


class Mutator:
    def __init__(self, spec, rng):
        self.s = spec
        self.rng = rng
        self.fresh = 0

    def new_name(self):
        self.fresh += 1
        return "m%d" % self.fresh

    def pick(self, seq):
        return self.rng.choice(seq) if seq else None

    def ops_named(self, names):
        return [i for i, op in enumerate(self.s.ops)
                if re.match(r"%\w+ = (\S+)", op)
                and re.match(r"%\w+ = (\S+)", op).group(1) in names]

    def visible(self, index, kinds):
        """Values of `kinds` defined before op `index`, states excluded
        unless asked for."""
        return [n for n, k, i in self.s.values() if k in kinds and i < index]

    # Each mutation returns a description, or None where it does not apply.

    def dims(self):
        k, v = self.pick(DIMS), self.pick(DIMS)
        s = self.s
        for alias, t in s.aliases.items():
            t = re.sub(r"tensor<\d+xf32, #linac.key>", "tensor<%dxf32, #linac.key>" % k, t)
            t = re.sub(r"tensor<\d+xf32, #linac.value>", "tensor<%dxf32, #linac.value>" % v, t)
            s.aliases[alias] = re.sub(r"\d+x\d+", "%dx%d" % (k, v), t)
        retype = lambda t: re.sub(r"\b\d+x\d+(?=x?f32|[,>])", "%dx%d" % (k, v), t)
        s.state[1] = retype(s.state[1])
        for arg in s.inputs + s.params:
            arg[1] = retype(arg[1])
        s.ops = [retype(op) for op in s.ops]
        s.yield_op = retype(s.yield_op)
        return "K=%d V=%d" % (k, v)

    def swap_unary(self):
        i = self.pick(self.ops_named(UNARY))
        if i is None:
            return None
        old = re.match(r"%\w+ = (\S+)", self.s.ops[i]).group(1)
        new = self.pick([u for u in UNARY if u != old])
        self.s.ops[i] = self.s.ops[i].replace(" " + old + " ", " " + new + " ", 1)
        return "%s -> %s" % (old, new)

    def swap_binary(self):
        i = self.pick(self.ops_named(BINARY))
        if i is None:
            return None
        op = self.s.ops[i]
        old = re.match(r"%\w+ = (\S+)", op).group(1)
        if self.rng.random() < 0.3:
            m = re.match(r"(%\w+ = \S+ )(%\w+), (%\w+)(.*)", op)
            self.s.ops[i] = m.group(1) + m.group(3) + ", " + m.group(2) + m.group(4)
            return "operands of %s swapped" % old
        new = self.pick([b for b in BINARY if b != old])
        self.s.ops[i] = op.replace(" " + old + " ", " " + new + " ", 1)
        return "%s -> %s" % (old, new)

    def constant(self):
        i = self.pick(self.ops_named(["arith.constant"]))
        if i is None:
            return None
        value = self.pick(CONSTANTS)
        op = self.s.ops[i]
        self.s.ops[i] = re.sub(r"(arith\.constant (?:dense<)?)[-0-9.e+]+",
                               lambda m: m.group(1) + value, op, count=1)
        return "constant %s" % value

    def substitute(self):
        """An operand of an op replaced by another value of its kind."""
        i = self.pick(range(len(self.s.ops)))
        op = self.s.ops[i]
        kinds = {n: k for n, k, _ in self.s.values()}
        result = re.match(r"%(\w+) =", op).group(1)
        uses = [n for n in re.findall(r"%(\w+)", op)[1:]
                if kinds.get(n) not in (None, "state")]
        old = self.pick(uses)
        if old is None:
            return None
        choices = [n for n in self.visible(i, [kinds[old]]) if n != old]
        new = self.pick(choices)
        if new is None:
            return None
        self.s.ops[i] = op.split("=", 1)[0] + "=" + use(old).sub(
            "%" + new, op.split("=", 1)[1], count=1)
        return "%%%s: %%%s -> %%%s" % (result, old, new)

    def strength(self):
        i = self.pick(self.ops_named(["linac.erase", "linac.write"]))
        if i is None:
            return None
        op = self.s.ops[i]
        erase = " linac.erase " in op
        m = re.search(r" strength\(%\w+ : [^)]*\)", op)
        if m and self.rng.random() < 0.4:
            self.s.ops[i] = op.replace(m.group(0), "")
            return "strength removed"
        side = "key" if erase else "value"
        kind = self.pick(["scalar", side, side if self.rng.random() < 0.9 else
                          ("value" if erase else "key")])
        name = self.pick(self.visible(i, [kind]))
        if name is None:
            return None
        clause = " strength(%%%s : %s)" % (name, self.s.spelling(kind))
        if m:
            self.s.ops[i] = op.replace(m.group(0), clause)
        else:
            head, types = op.rsplit(" : ", 1)
            self.s.ops[i] = head + clause + " : " + types
        return "strength %%%s" % name

    def decay_side(self):
        i = self.pick(self.ops_named(["linac.decay"]))
        if i is None:
            return None
        op = self.s.ops[i]
        sides = re.findall(r" (key|value)\((%\w+) : ([^)]*)\)", op)
        choice = self.rng.random()
        if len(sides) == 2 and choice < 0.3:
            drop = self.pick(sides)
            self.s.ops[i] = op.replace(" %s(%s : %s)" % drop, "")
            return "decay's %s side removed" % drop[0]
        if choice < 0.7:
            side = self.pick(["key", "value"])
            kinds = ["scalar", "key"] if side == "key" else ["value"]
            name = self.pick(self.visible(i, kinds))
            if name is None:
                return None
            kind = dict((n, k) for n, k, _ in self.s.values())[name]
            clause = " %s(%%%s : %s)" % (side, name, self.s.spelling(kind))
            old = [s for s in sides if s[0] == side]
            if old:
                self.s.ops[i] = op.replace(" %s(%s : %s)" % old[0], clause)
            else:
                head, types = op.rsplit(" : ", 1)
                # The key side comes first.
                if side == "key":
                    head = head.replace(" value(", clause + " value(", 1) \
                        if " value(" in head else head + clause
                else:
                    head += clause
                self.s.ops[i] = head + " : " + types
            return "decay %s(%%%s)" % (side, name)
        # A new gate: -softplus(x) of an existing value, on a fresh value.
        side = self.pick(["key", "value"])
        source = self.pick(self.visible(i, [side]))
        if source is None:
            return None
        t = self.s.spelling(side)
        a, b = self.new_name(), self.new_name()
        self.s.ops[i:i] = ["%%%s = linac.softplus %%%s : %s" % (a, source, t),
                           "%%%s = arith.negf %%%s : %s" % (b, a, t)]
        return self.decay_with(i + 2, side, b)

    def decay_with(self, i, side, name):
        op = self.s.ops[i]
        clause = " %s(%%%s : %s)" % (side, name, self.s.spelling(side))
        old = re.search(r" %s\(%%\w+ : [^)]*\)" % side, op)
        if old:
            self.s.ops[i] = op.replace(old.group(0), clause)
        else:
            head, types = op.rsplit(" : ", 1)
            if side == "key" and " value(" in head:
                head = head.replace(" value(", clause + " value(", 1)
            else:
                head += clause
            self.s.ops[i] = head + " : " + types
        return "decay %s(-softplus)" % side

    def read(self):
        reads = self.ops_named(["linac.read"])
        i = self.pick(reads)
        if i is None:
            return None
        op = self.s.ops[i]
        choice = self.rng.random()
        if choice < 0.35:
            # Read another state, placed after its definition.
            states = [(n, d) for n, k, d in self.s.values() if k == "state"]
            name, defined = self.pick(states)
            m = re.match(r"(%\w+ = linac\.read )(%\w+)(.*)", op)
            moved = m.group(1) + "%" + name + m.group(3)
            del self.s.ops[i]
            place = self.rng.randint(defined + 1, len(self.s.ops)) \
                if defined + 1 <= len(self.s.ops) else len(self.s.ops)
            self.s.ops.insert(max(place, 0), moved)
            return "read %%%s at op %d" % (name, place)
        if choice < 0.6:
            if " scale " in op:
                self.s.ops[i] = re.sub(r" scale [-0-9.e+]+", "", op)
                return "read scale removed"
            value = self.pick(["1.0", "0.5", "0.125", "2.0"])
            self.s.ops[i] = op.replace(" : ", " scale %s : " % value, 1)
            return "read scale %s" % value
        if choice < 0.75:
            if " normalized " in op.split(" : ")[0] + " ":
                self.s.ops[i] = op.replace(" normalized", "", 1)
                return "read not normalized"
            m = re.match(r"(%\w+ = linac\.read %\w+, %\w+)(.*)", op)
            self.s.ops[i] = m.group(1) + " normalized" + m.group(2)
            return "read normalized"
        # Read another query.
        return self.substitute_in(i, "key")

    def substitute_in(self, i, kind):
        op = self.s.ops[i]
        kinds = {n: k for n, k, _ in self.s.values()}
        uses = [n for n in re.findall(r"%(\w+)", op)[1:] if kinds.get(n) == kind]
        old = self.pick(uses)
        new = self.pick([n for n in self.visible(i, [kind]) if n != old])
        if old is None or new is None:
            return None
        head, rest = op.split("=", 1)
        self.s.ops[i] = head + "=" + use(old).sub("%" + new, rest, count=1)
        return "%%%s -> %%%s" % (old, new)

    def remove_transition(self):
        i = self.pick(self.ops_named(TRANSITIONS))
        if i is None:
            return None
        op = self.s.ops[i]
        m = re.match(r"%(\w+) = \S+ %(\w+)", op)
        result, source = m.groups()
        del self.s.ops[i]
        self.s.ops = [use(result).sub("%" + source, o) for o in self.s.ops]
        self.s.yield_op = use(result).sub("%" + source, self.s.yield_op)
        return "%s removed" % op.split()[2]

    def add_transition(self):
        states = [(n, d) for n, k, d in self.s.values() if k == "state"]
        # Insert after the last state's definition and feed the yield.
        name, defined = states[-1]
        i = defined + 1
        keys = self.visible(i, ["key"])
        if not keys:
            return None
        new = self.new_name()
        st = self.s.spelling("state")
        kind = self.pick(["erase", "write", "decay", "decay"])
        k = self.pick(keys)
        if kind == "erase":
            s = self.pick(self.visible(i, ["scalar", "key"]))
            strength = " strength(%%%s : %s)" % (
                s, self.s.spelling(dict((n, kk) for n, kk, _ in self.s.values())[s])) \
                if s and self.rng.random() < 0.8 else ""
            op = "%%%s = linac.erase %%%s, %%%s%s : %s, %s" % (
                new, name, k, strength, st, self.s.spelling("key"))
        elif kind == "write":
            v = self.pick(self.visible(i, ["value"]))
            if v is None:
                return None
            op = "%%%s = linac.write %%%s, %%%s, %%%s : %s, %s, %s" % (
                new, name, k, v, st, self.s.spelling("key"),
                self.s.spelling("value"))
        else:
            g = self.pick(self.visible(i, ["scalar", "key"]))
            a, b = self.new_name(), self.new_name()
            gk = dict((n, kk) for n, kk, _ in self.s.values())[g]
            t = self.s.spelling(gk)
            self.s.ops[i:i] = ["%%%s = linac.softplus %%%s : %s" % (a, g, t),
                               "%%%s = arith.negf %%%s : %s" % (b, a, t)]
            i += 2
            op = "%%%s = linac.decay %%%s key(%%%s : %s) : %s" % (
                new, name, b, t, st)
        self.s.ops.insert(i, op)
        # Later uses of the old state (the read, the yield) take the new one.
        for j in range(i + 1, len(self.s.ops)):
            self.s.ops[j] = use(name).sub("%" + new, self.s.ops[j])
        self.s.yield_op = use(name).sub("%" + new, self.s.yield_op)
        return "%s added" % kind

    def add_pure(self):
        i = self.rng.randint(0, len(self.s.ops))
        kind = self.pick(["scalar", "key", "value"])
        source = self.pick(self.visible(i, [kind]))
        if source is None:
            return None
        t = self.s.spelling(kind)
        new = self.new_name()
        choice = self.rng.random()
        if kind != "scalar" and choice < 0.3:
            op = "%%%s = linac.l2norm %%%s : %s" % (new, source, t)
        elif kind != "scalar" and choice < 0.45:
            op = "%%%s = linac.dot %%%s, %%%s : %s" % (new, source, source, t)
            kind = "scalar"
        elif kind == "scalar" and choice < 0.3:
            op = "%%%s = linac.broadcast %%%s : %s" % (
                new, source, self.s.spelling(self.pick(["key", "value"])))
        elif choice < 0.5:
            op = "%%%s = linac.head_index : f32" % new
            kind = "scalar"
        else:
            op = "%%%s = %s %%%s : %s" % (new, self.pick(UNARY), source, t)
        self.s.ops.insert(i, op)
        # Feed it to a later op that takes a value of its kind, if any.
        kinds = {n: k for n, k, _ in self.s.values()}
        for j in range(i + 1, len(self.s.ops)):
            uses = [n for n in re.findall(r"%(\w+)", self.s.ops[j])[1:]
                    if kinds.get(n) == kinds.get(new)]
            if uses and self.rng.random() < 0.5:
                old = self.pick(uses)
                head, rest = self.s.ops[j].split("=", 1)
                self.s.ops[j] = head + "=" + use(old).sub("%" + new, rest, count=1)
                return "%s added, in place of %%%s" % (op.split()[2], old)
        return "unused %s added" % op.split()[2]

    def remove_pure(self):
        kinds = {n: k for n, k, _ in self.s.values()}
        candidates = [i for i, op in enumerate(self.s.ops)
                      if op.split()[2] not in TRANSITIONS + ["linac.read"]]
        i = self.pick(candidates)
        if i is None:
            return None
        op = self.s.ops[i]
        result = re.match(r"%(\w+)", op).group(1)
        operands = [n for n in re.findall(r"%(\w+)", op)[1:]
                    if kinds.get(n) == kinds[result]]
        if not operands:
            return None
        del self.s.ops[i]
        self.s.ops = [use(result).sub("%" + operands[0], o) for o in self.s.ops]
        self.s.yield_op = use(result).sub("%" + operands[0], self.s.yield_op)
        return "%s removed" % op.split()[2]

    def move_op(self):
        """A line moved: may break dominance, to be rejected cleanly."""
        if len(self.s.ops) < 2:
            return None
        i = self.rng.randrange(len(self.s.ops))
        op = self.s.ops.pop(i)
        j = self.rng.randrange(len(self.s.ops) + 1)
        self.s.ops.insert(j, op)
        return "op %d moved to %d" % (i, j)

    def yield_(self):
        kinds = ["state", "value"]
        kind = self.pick(kinds)
        m = re.match(r"linac\.yield %(\w+), %(\w+)(.*)", self.s.yield_op)
        new = self.pick(self.visible(len(self.s.ops), [kind]))
        state, output = m.group(1), m.group(2)
        if kind == "state":
            state = new
        else:
            output = new
        self.s.yield_op = "linac.yield %%%s, %%%s%s" % (state, output, m.group(3))
        return "yield %%%s, %%%s" % (state, output)

    def l2norm_eps(self):
        i = self.pick(self.ops_named(["linac.l2norm"]))
        if i is None:
            return None
        eps = self.pick(["1.0e-03", "0.0", "1.0"])
        self.s.ops[i] = self.s.ops[i].replace(" : ", " {eps = %s : f64} : " % eps, 1)
        return "l2norm eps %s" % eps

    def retype_input(self):
        """An input of one kind made another: mostly rejected."""
        arg = self.pick(self.s.inputs)
        kind = self.pick(["scalar", "key", "value"])
        arg[1] = self.s.spelling(kind)
        return "input %%%s is %s" % (arg[0], kind)


MUTATIONS = [
    ("swap_unary", 6), ("swap_binary", 5), ("constant", 4),
    ("substitute", 4), ("strength", 5), ("decay_side", 5), ("read", 5),
    ("remove_transition", 3), ("add_transition", 4), ("add_pure", 3),
    ("remove_pure", 2), ("move_op", 1), ("yield_", 1), ("l2norm_eps", 1),
    ("retype_input", 1),
]


def mutate(text, rng):
    spec = Spec(text)
    mutator = Mutator(spec, rng)
    done = [mutator.dims()]
    names = [n for n, _ in MUTATIONS]
    weights = [w for _, w in MUTATIONS]
    for _ in range(rng.choice([1, 1, 2, 2, 3])):
        for _ in range(10):
            what = getattr(mutator, rng.choices(names, weights)[0])()
            if what:
                done.append(what)
                break
    return spec, done


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("specs", nargs="+")
    args = parser.parse_args()
    sources = sorted(args.specs)
    texts = {path: open(path).read() for path in sources}
    os.makedirs(args.out, exist_ok=True)
    for name in os.listdir(args.out):
        if name.endswith(".mlir"):
            os.remove(os.path.join(args.out, name))
    rng = random.Random(args.seed)
    for n in range(args.count):
        path = sources[n % len(sources)]
        spec, done = mutate(texts[path], rng)
        base = os.path.splitext(os.path.basename(path))[0]
        comment = "// mutant %d of %s (seed %d): %s" % (
            n, base, args.seed, "; ".join(done))
        with open(os.path.join(args.out, "%04d_%s.mlir" % (n, base)), "w") as f:
            f.write(spec.text(comment))


if __name__ == "__main__":
    main()
