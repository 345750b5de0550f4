import os, resource, time
_F = os.environ.get("AGENTD_PROBE")
_marks = []
def mark(name):
    if _F:
        r = resource.getrusage(resource.RUSAGE_SELF)
        _marks.append((name, r.ru_utime, r.ru_stime, r.ru_minflt))
def dump():
    if _F and _marks:
        with open(_F, "a") as fh:
            fh.write(repr(_marks) + "\n")

def smaps():
    d = os.environ.get("AGENTD_SMAPS")
    if not d: return
    import shutil
    shutil.copyfile("/proc/self/smaps", f"{d}/{os.getpid()}.smaps")
