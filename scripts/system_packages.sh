#!/usr/bin/env bash
# Installs the Debian packages that some tests need, when they are missing:
#   nginx   the load balancer of tests/deploy/test_scale_out.py and bench/scale_out.py
#   prometheus  (with promtool) tests/integration/test_prometheus.py, tests/deploy/test_grafana.py
#   chromium, chromium-driver  the headless browser of tests/integration/test_dashboard.py
#   libb64-0d   a library of Triton's perf_analyzer (from the tritonclient wheel), which
#               tests/integration/test_perf_analyzer.py runs against the server
# Needs root and apt-get. Where either is missing it says what could not be installed and
# exits 0: those tests then skip and say why.
set -euo pipefail

missing=()
if ! command -v nginx >/dev/null && [[ ! -x /usr/sbin/nginx ]]; then
  missing+=(nginx)
fi
if ! command -v prometheus >/dev/null || ! command -v promtool >/dev/null; then
  missing+=(prometheus)
fi
if ! command -v chromium >/dev/null; then
  missing+=(chromium)
fi
if ! command -v chromedriver >/dev/null; then
  missing+=(chromium-driver)
fi
if ! ldconfig -p | grep -q 'libb64\.so\.0d'; then
  missing+=(libb64-0d)
fi
[[ ${#missing[@]} -eq 0 ]] && exit 0

if [[ $(id -u) -ne 0 ]] || ! command -v apt-get >/dev/null; then
  echo "system_packages.sh: cannot install ${missing[*]} (needs root and apt-get)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
log=$(mktemp)
if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}"; } \
    >"$log" 2>&1; then
  echo "system_packages.sh: apt-get could not install ${missing[*]}:" >&2
  tail -n 5 "$log" >&2
fi
rm -f "$log"
exit 0
