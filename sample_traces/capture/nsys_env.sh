# nsys_env.sh DEBS: sourced by the nsys capture scripts. Unpacks Debian's libdw1 and the
# libraries it needs (the .deb files in DEBS, fetched elsewhere with `apt-get download
# libdw1 libelf1 libzstd1 liblzma5 libbz2-1.0`) into a private folder on LD_LIBRARY_PATH, so
# an nsys whose QdstrmImporter lacks libdw.so.1 can make its report; nothing is installed.
# Sets NSYS (env NSYS, else nsys on PATH, else the first nsys binary under /opt or
# /usr/local) and prints its version, or returns 3.
_libroot=$(mktemp -d)
for _deb in "${1:-.dw}"/*.deb; do [ -f "$_deb" ] && dpkg -x "$_deb" "$_libroot"; done
export LD_LIBRARY_PATH="$_libroot/usr/lib/x86_64-linux-gnu:$_libroot/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
NSYS=${NSYS:-$(command -v nsys || find /opt /usr/local -name nsys -type f -perm -u+x 2>/dev/null | head -1)}
if [ ! -x "$NSYS" ]; then echo "nsys_env.sh: no nsys found" >&2; return 3; fi
echo "nsys: $NSYS"; "$NSYS" --version
