"""The part of the probe program that reads the host facts a Spark operator checks by hand.

It is pasted into the probe (`probe_script.PROBE_SCRIPT`) and runs in the same python3 process,
in the same single SSH round trip: stdlib only, Python 3.8 syntax (Ubuntu's python3 on DGX OS is
newer, the rig's Debian 12 has 3.11; nothing newer than 3.8 is used), and no fact may crash it. A fact
that cannot be read is `null` plus one line in `errors`; a fact that was read and is empty (no
RDMA device, no /dev/infiniband) is an empty list. The texts are sent raw where a format has to
be understood (os-release, dgx-release, the driver version files, nvidia-smi): the control node
parses them with `reconciler.facts.hostinfo`, tested on recorded outputs.

Where each value comes from on a DGX Spark:

- links and IPv4 addresses: rtnetlink (RTM_GETLINK, RTM_GETADDR), the kernel's answer for the
  probe's own network namespace. /sys/class/net is not read for them: sysfs shows the devices of the
  namespace it was mounted in, so a process that entered a namespace with `nsenter --net` (the rig's
  sshd) would list the machine's devices, not its own. No `ip -j` is needed (iproute2 is not
  guaranteed on a host, and its JSON needs iproute2 4.14+). Link speed: the SIOCETHTOOL ioctl
  (ETHTOOL_GSET, allowed without privileges), what /sys/class/net/<if>/speed reports too;
- RDMA: /sys/class/infiniband/<hca>, the tree sparkrun's scripts/ib_detect.sh and cx7_detect.sh
  walk: `device/net/*` names the netdev behind the HCA, `ports/1/state` reads "4: ACTIVE" or
  "1: DOWN", `ports/1/gids/<i>` prints a GID as eight hex groups ("0000:0000:0000:0000:0000:ffff:
  c0a8:640b" is 192.168.100.11) and `ports/1/gid_attrs/types/<i>` its type ("IB/RoCE v1" or
  "RoCE v2"; reading the type of an empty slot fails, which is not an error). A Spark shows the
  four HCAs of NVIDIA's connect-two-sparks playbook (rocep1s0f0, rocep1s0f1, roceP2p1s0f0,
  roceP2p1s0f1) and its IPv4 RoCE v2 GID at index 3 (the playbook's perftest output: "GID index : 3");
- /dev/infiniband: the uverbs/umad/rdma_cm character devices a container needs to open the HCAs;
- driver: /sys/module/nvidia/version, else the first line of /proc/driver/nvidia/version;
  CUDA: the header of `nvidia-smi` ("CUDA Version: 13.0"), the one line of its table sent (the rest
  holds its clock and temperatures, which change every call); GPU compute processes:
  `nvidia-smi --query-compute-apps=pid --format=csv,noheader` (graphics clients such as Xorg, which
  the full table lists on a Spark with a desktop, are not compute apps). nvidia-smi is given 10 s:
  a wedged GPU can hang it, and the whole probe has 30;
- OS: /etc/os-release (/usr/lib/os-release as os-release(5) allows), /etc/dgx-release when present,
  uname;
- disks: statvfs of each model path and of the HF cache, or of the nearest parent that exists (a
  model not downloaded yet still needs room on the filesystem it will land on).
"""

from __future__ import annotations

HOST_SOURCE = r"""
import array, fcntl, struct


def read_text(path):
    with open(path) as f:
        return f.read()


def guarded(name, errors, fn, default=None):
    # One fact failing must not hide the others, nor stop the probe.
    try:
        return fn()
    except Exception as e:
        errors.append("%s: %s" % (name, getattr(e, "strerror", None) or "%s: %s" % (type(e).__name__, e)))
        return default


def os_release_text():
    try:
        return read_text("/etc/os-release")
    except FileNotFoundError:
        return read_text("/usr/lib/os-release")


def dgx_release_text():
    try:
        return read_text("/etc/dgx-release")
    except FileNotFoundError:
        return None  # not DGX OS: a fact, not an error


def nvidia_version(errors):
    for path in ("/sys/module/nvidia/version", "/proc/driver/nvidia/version"):
        try:
            return {"path": path, "text": read_text(path)}
        except FileNotFoundError:
            continue
    errors.append("nvidia driver: not loaded (no /sys/module/nvidia/version, no /proc/driver/nvidia/version)")
    return None


def nvidia_smi(args, errors, state):
    if state.get("missing"):
        return None
    try:
        p = subprocess.run(["nvidia-smi"] + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           universal_newlines=True, timeout=10)
    except FileNotFoundError:
        state["missing"] = True
        errors.append("nvidia-smi: not found")
        return None
    except subprocess.TimeoutExpired:
        errors.append("nvidia-smi %s: timed out after 10 s" % " ".join(args[:1]))
        return None
    if p.returncode != 0:
        tail = (p.stderr.strip() or p.stdout.strip()).splitlines()[-2:]
        errors.append("nvidia-smi %s: exit %d: %s" % (" ".join(args[:1]), p.returncode, " ".join(tail)))
        return None
    return p.stdout


def smi_header(text):
    # Only the header line is read (the CUDA version, facts/hostinfo.py); the rest of the table holds
    # the clock, temperatures and power, which change on every call and would change the fact digest.
    return "".join(line + "\n" for line in text.splitlines() if "CUDA Version" in line)


# rtnetlink, <linux/netlink.h> and <linux/rtnetlink.h>
NLMSG_ERROR, NLMSG_DONE = 2, 3
RTM_NEWLINK, RTM_GETLINK, RTM_NEWADDR, RTM_GETADDR = 16, 18, 20, 22
NLM_F_REQUEST, NLM_F_DUMP = 1, 0x300
IFLA_IFNAME, IFLA_MTU, IFLA_OPERSTATE = 3, 4, 16
IFA_ADDRESS, IFA_LOCAL = 1, 2
# IF_OPER_* of <linux/if.h>, spelled as /sys/class/net/<if>/operstate spells them
OPERSTATES = ["unknown", "notpresent", "down", "lowerlayerdown", "testing", "dormant", "up"]


def netlink_dump(msg_type, payload):
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 0)  # 0: NETLINK_ROUTE
    try:
        s.bind((0, 0))
        s.sendto(struct.pack("=IHHII", 16 + len(payload), msg_type, NLM_F_REQUEST | NLM_F_DUMP, 1, 0)
                 + payload, (0, 0))
        out = []
        while True:
            data = s.recv(65536)
            at = 0
            while at + 16 <= len(data):
                length, kind, _flags, _seq, _pid = struct.unpack_from("=IHHII", data, at)
                if length < 16:
                    return out
                if kind == NLMSG_DONE:
                    return out
                if kind == NLMSG_ERROR:
                    code = struct.unpack_from("=i", data, at + 16)[0]
                    if code:
                        raise OSError(-code, os.strerror(-code))
                else:
                    out.append((kind, data[at + 16:at + length]))
                at += (length + 3) & ~3
    finally:
        s.close()


def rtattrs(body, offset):
    attrs = {}
    while offset + 4 <= len(body):
        length, kind = struct.unpack_from("=HH", body, offset)
        if length < 4:
            break
        attrs[kind] = body[offset + 4:offset + length]
        offset += (length + 3) & ~3
    return attrs


def link_speed(name):
    # struct ethtool_cmd (44 bytes): speed is the u16 at 12, speed_hi the u16 at 28; ETHTOOL_GSET = 1.
    cmd = array.array("B", struct.pack("=I", 1) + bytes(40))
    ifreq = struct.pack("16sP", name.encode()[:15], cmd.buffer_info()[0])
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        fcntl.ioctl(s.fileno(), 0x8946, ifreq + bytes(40 - len(ifreq)))  # SIOCETHTOOL
    except OSError:
        return None  # no ethtool for this device (loopback, a bridge): it has no speed to tell
    finally:
        s.close()
    raw = cmd.tobytes()
    speed = struct.unpack_from("=H", raw, 12)[0] | (struct.unpack_from("=H", raw, 28)[0] << 16)
    return None if speed in (0, 0xFFFF, 0xFFFFFFFF) else speed  # SPEED_UNKNOWN when the link is down


def links():
    by_index = {}
    for _kind, body in netlink_dump(RTM_GETLINK, struct.pack("=BxHiII", socket.AF_UNSPEC, 0, 0, 0, 0)):
        _family, _type, index, _flags, _change = struct.unpack_from("=BxHiII", body, 0)
        attrs = rtattrs(body, 16)
        name = attrs.get(IFLA_IFNAME, b"").split(b"\0")[0].decode("utf-8", "replace")
        mtu = struct.unpack("=I", attrs[IFLA_MTU][:4])[0] if IFLA_MTU in attrs else None
        oper = attrs.get(IFLA_OPERSTATE)
        state = OPERSTATES[oper[0]] if oper and oper[0] < len(OPERSTATES) else "unknown"
        by_index[index] = {"name": name, "operstate": state, "mtu": mtu, "speed": link_speed(name),
                           "ipv4": []}
    for _kind, body in netlink_dump(RTM_GETADDR, struct.pack("=BBBBI", socket.AF_INET, 0, 0, 0, 0)):
        family, prefix, _flags, _scope, index = struct.unpack_from("=BBBBI", body, 0)
        if family != socket.AF_INET or index not in by_index:
            continue
        attrs = rtattrs(body, 8)
        raw = attrs.get(IFA_LOCAL) or attrs.get(IFA_ADDRESS)  # IFA_ADDRESS is the peer on a point-to-point link
        if raw and len(raw) >= 4:
            by_index[index]["ipv4"].append("%s/%d" % (socket.inet_ntoa(raw[:4]), prefix))
    return [by_index[i] for i in sorted(by_index)]


IPV4_MAPPED = "0000:0000:0000:0000:0000:ffff:"


def rdma_device(root, name):
    try:
        netdevs = sorted(os.listdir(os.path.join(root, name, "device", "net")))
    except OSError:
        netdevs = []  # an HCA without an Ethernet netdev (InfiniBand mode): none to name
    port = os.path.join(root, name, "ports", "1")
    try:
        state = read_text(os.path.join(port, "state")).strip()
    except OSError:
        state = None
    gids = []
    try:
        slots = os.listdir(os.path.join(port, "gids"))
    except OSError:
        slots = []
    for slot in sorted(slots, key=lambda s: int(s) if s.isdigit() else -1):
        try:
            gid = read_text(os.path.join(port, "gids", slot)).strip()
        except OSError:
            continue
        if not gid.startswith(IPV4_MAPPED) or not slot.isdigit():
            continue  # only the IPv4 GIDs matter here: NCCL needs the one of the port's address
        try:
            kind = read_text(os.path.join(port, "gid_attrs", "types", slot)).strip()
        except OSError:
            kind = None  # an empty or reserved slot: the kernel refuses to name its type
        gids.append({"index": int(slot), "gid": gid, "type": kind})
    return {"name": name, "netdevs": netdevs, "port_state": state, "gids": gids}


def rdma_devices():
    root = "/sys/class/infiniband"
    try:
        names = sorted(os.listdir(root))
    except FileNotFoundError:
        return []  # no RDMA stack (or no RDMA hardware): nothing to list
    return [rdma_device(root, n) for n in names]


def dev_infiniband():
    try:
        return sorted(os.listdir("/dev/infiniband"))
    except FileNotFoundError:
        return []


def disk_space(path):
    at = path
    while not os.path.exists(at) and os.path.dirname(at) != at:
        at = os.path.dirname(at)
    s = os.statvfs(at)
    return {"measured_at": at, "total": s.f_blocks * s.f_frsize, "free": s.f_bavail * s.f_frsize}


def host_facts(disk_paths, errors):
    out = {}
    out["os_release"] = guarded("/etc/os-release", errors, os_release_text)
    out["dgx_release"] = guarded("/etc/dgx-release", errors, dgx_release_text)
    u = os.uname()
    out["uname"] = {"release": u.release, "machine": u.machine}
    out["nvidia_version"] = guarded("nvidia driver", errors, lambda: nvidia_version(errors))
    smi = {}
    table = nvidia_smi([], errors, smi)
    out["nvidia_smi"] = smi_header(table) if table is not None else None
    # A failing nvidia-smi (no NVML, a driver/library mismatch) fails the same way twice: ask once.
    out["compute_apps"] = (nvidia_smi(["--query-compute-apps=pid", "--format=csv,noheader"], errors, smi)
                           if out["nvidia_smi"] is not None else None)
    out["links"] = guarded("network links", errors, links)
    out["rdma"] = guarded("/sys/class/infiniband", errors, rdma_devices)
    out["dev_infiniband"] = guarded("/dev/infiniband", errors, dev_infiniband)
    disks = {}
    for p in disk_paths:
        space = guarded("disk space %s" % p, errors, lambda p=p: disk_space(p))
        if space is not None:
            disks[p] = space
    out["disks"] = disks
    return out
"""
