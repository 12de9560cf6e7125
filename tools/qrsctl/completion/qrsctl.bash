# bash completion for qrsctl(1)                            -*- shell-script -*-
# Installed as bash-completion's completions/qrsctl (loaded on demand).

_qrsctl_sources()
{
    # The configured sources, asked of the running qrsd (quietly, briefly).
    local sock=()
    [[ -n $1 ]] && sock=(--socket "$1")
    qrsctl "${sock[@]}" --timeout 500 --json sources 2>/dev/null |
        sed -n 's/.*"name" *: *"\([^"]*\)".*/\1/p' | tr -d '\r'
}

_qrsctl()
{
    local cur prev words cword
    _init_completion || return

    local commands="status health sources metrics reload source quota draw bytes validate"
    local global="--socket --json --timeout --help --version -s -j -c -t -h -V"
    local i cmd= sockpath=
    for ((i = 1; i < cword; i++)); do
        case ${words[i]} in
            -s | --socket) sockpath=${words[i + 1]}; ((i++)) ;;
            --socket=*) sockpath=${words[i]#--socket=} ;;
            -t | --timeout) ((i++)) ;;
            -*) ;;
            *) cmd=${words[i]}; break ;;
        esac
    done

    case $prev in
        -s | --socket | --textfile)
            _filedir
            return ;;
        -t | --timeout | -n | --count | --samples | --population-mean | \
        --population-std | --epsilon | --zscore-calibration | \
        --ecdf-calibration | --salt | --step | --prev-token | --interval | \
        --unit)
            return ;;
        --source)
            COMPREPLY=($(compgen -W "$(_qrsctl_sources "$sockpath")" -- "$cur"))
            return ;;
        --amplifier)
            COMPREPLY=($(compgen -W "zscore_mean zscore_thought ecdf exact server" -- "$cur"))
            return ;;
    esac

    if [[ -z $cmd ]]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "$global" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$commands" -- "$cur"))
        fi
        return
    fi

    local opts="--json --help"
    case $cmd in
        draw)
            opts+=" --count --source --unit --samples --amplifier --population-mean
                --population-std --epsilon --zscore-calibration
                --ecdf-calibration --salt --step --prev-token" ;;
        bytes) opts+=" --count --source --force" ;;
        metrics) opts+=" --textfile --interval" ;;
        validate)
            if [[ $cur != -* ]]; then
                _filedir '@(yaml|yml)'
                return
            fi ;;
    esac
    COMPREPLY=($(compgen -W "$opts" -- "$cur"))
} &&
    complete -F _qrsctl qrsctl

# ex: filetype=sh
