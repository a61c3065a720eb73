"""Write the copy of deltacast.py that `meson install` puts in site-packages.

    stamp_install.py IN OUT LIBDIR PYDIR LIBNAME

The copy differs from the source in one line: `_INSTALLED_LIB = None`
becomes the library's path relative to the module's folder (LIBDIR relative
to PYDIR, both absolute install paths) and its file name (the soname), so
that the installed module loads the installed library wherever the tree was
put (a prefix, DESTDIR) without LD_LIBRARY_PATH.
"""
import os
import sys


def main(argv):
    if len(argv) != 6:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    src, out, libdir, pydir, libname = argv[1:]
    for d in (libdir, pydir):
        if not os.path.isabs(d):
            print(f"stamp_install.py: {d} is not an absolute path", file=sys.stderr)
            return 2
    rel = os.path.relpath(libdir, pydir)
    with open(src, encoding="utf-8") as f:
        lines = f.read().split("\n")
    marker = "_INSTALLED_LIB = None"
    hits = [i for i, line in enumerate(lines) if line == marker]
    if len(hits) != 1:
        print(f"stamp_install.py: {src} has {len(hits)} lines '{marker}' (want one)",
              file=sys.stderr)
        return 1
    lines[hits[0]] = f"_INSTALLED_LIB = ({rel!r}, {libname!r})  # written by meson install"
    with open(out, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
