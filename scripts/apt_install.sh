# Sourced by the scripts that install Debian packages (needs root).
#   apt_install PACKAGE...
# Installs the packages that are not installed yet. A fresh machine may be
# running its own apt jobs (apt-daily, unattended-upgrades) that hold dpkg's
# lock, and a mirror may have moved on since the last `apt-get update`: so it
# waits for the lock, refreshes the index first, and tries 3 times. A changed
# configuration file keeps the machine's version, without a prompt.
apt_install() {
  local missing=() p try
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -gt 0 ] || return 0
  echo "apt-get install ${missing[*]}"
  for try in 1 2 3; do
    if DEBIAN_FRONTEND=noninteractive apt-get -qq -o DPkg::Lock::Timeout=600 update &&
       DEBIAN_FRONTEND=noninteractive apt-get -y -qq -o DPkg::Lock::Timeout=600 \
         -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
         install "${missing[@]}" >/dev/null; then
      return 0
    fi
    echo "apt-get install failed (try $try of 3)" >&2
    [ $try = 3 ] || sleep $((try * 15))
  done
  return 1
}
