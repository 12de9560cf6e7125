#!/bin/bash
# Usage: test-completion.sh qrsctl.bash
# The completion script loads in bash with Debian's bash-completion and
# completes commands, global options, a command's options and amplifiers.
set -u
. /usr/share/bash-completion/bash_completion ||
  { echo "bash-completion is not installed" >&2; exit 1; }
. "$1" || exit 1
complete -p qrsctl | grep -q _qrsctl || { echo "not registered" >&2; exit 1; }
fail=0
try() {  # try "WORDS..." EXPECTED...
  local line=$1; shift
  read -r -a COMP_WORDS <<< "$line"
  [[ $line == *" " ]] && COMP_WORDS+=("")
  COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
  COMP_LINE=$line COMP_POINT=${#line}
  COMPREPLY=()
  _qrsctl qrsctl "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD - 1]}"
  local got=" ${COMPREPLY[*]} " w
  for w in "$@"; do
    [[ $got == *" $w "* ]] || { echo "'$line': no '$w' in:$got" >&2; fail=1; }
  done
}
try "qrsctl " status health sources metrics reload source quota draw bytes validate
try "qrsctl rel" reload
try "qrsctl me" metrics
try "qrsctl --so" --socket
try "qrsctl draw --am" --amplifier
try "qrsctl draw --amplifier " zscore_mean ecdf exact server
try "qrsctl -s /tmp/x bytes --f" --force
try "qrsctl --timeout 5 sources --j" --json
try "qrsctl metrics --t" --textfile
[ $fail -eq 0 ] && echo "completion OK"
exit $fail
