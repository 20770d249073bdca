# grade.awk: parse one SWE-rebench V2 test log and grade it against the expected test ids.
#
# The same file grades inside task images (tests/test.sh) and on the host (codedojo's grading.py), so a
# reward means the same thing wherever it was computed. Many images have no Python, so this is strictly
# POSIX awk and gives identical results under mawk, gawk and busybox awk. Always run it with LC_ALL=C:
# the parsers work on bytes, and the Unicode marks test runners print are matched as byte sequences.
#
#   LC_ALL=C awk -v parser=NAME -v f2p=FILE -v p2p=FILE -v out=DIR -f grade.awk LOG
#   LC_ALL=C awk -v list=1 -f grade.awk            (prints the supported parser names)
#
# NAME is the dataset's `install_config.log_parser`. FILE holds one expected test id per line. Only the
# lines of LOG between a BEGIN_MARK line and an END_MARK line are parsed (several regions may follow each
# other; an unclosed one runs to the end of LOG); `-v whole=1` parses every line instead.
#
# On success it writes DIR/report.json (per-test statuses, for people) and then DIR/reward.json:
#   {"reward": 1 or 0, "fail_to_pass": fraction of FAIL_TO_PASS passed, "pass_to_pass": fraction ...}
# reward is 1 only when every expected id is PASSED. An unknown parser, a log without a test region, a
# log in which the parser finds no test at all, or no expected ids is a verifier error: no reward.json is
# written, the reason goes to stderr and to report.json, and the exit status is 2. It never guesses 0.
#
# Each parser reproduces the test-id conventions of the upstream parser of the same name (the dataset's
# ids were produced by those), including which status wins when a test is reported twice. Ids are then
# normalised on both sides by stripping timing suffixes (" [1.3 ms]", " in 2 sec", " (12ms)"), and a test
# counts as passed when its normalised id maps to PASSED. Written from the observed formats, not copied.

BEGIN {
    BEGIN_MARK = ">>>>> codedojo: test command output begins"
    END_MARK = "<<<<< codedojo: test command output ends"

    # One whitespace character as Python's `\s` sees it in ASCII, and every whitespace Python's
    # str.split()/strip() remove, including the UTF-8 encoded Unicode spaces.
    SP = "[ \t\n\r\013\014\034\035\036\037]"
    WSALT = "[ \t\n\r\013\014\034-\037]|\302[\205\240]|\341\232\200|\342\200[\200-\212\250\251\257]|\342\201\237|\343\200\200"

    CHECK = "\342\234\223"; HEAVY_CHECK = "\342\234\224"; MULT_X = "\342\234\225"; HEAVY_X = "\342\234\226"
    BALLOT_X = "\342\234\230"; CIRCLE = "\342\227\213"; DOTTED_CIRCLE = "\342\227\214"
    WHITE_BULLET = "\342\227\246"; WHITE_CIRCLE = "\342\232\252"; TIMES = "\303\227"
    DOWN_ARROW = "\342\206\223"; RETURN_ARROW = "\342\206\251"

    # Upstream parser name -> the implementation here. Aliases upstream reaches through getattr are
    # listed too, so a row naming them grades the same way.
    n = split("parse_log_pytest=pytest parse_log_astroid=pytest parse_log_flask=pytest " \
        "parse_log_marshmallow=pytest parse_log_pvlib=pytest parse_log_pyvista=pytest " \
        "parse_log_sqlfluff=pytest parse_log_xarray=pytest parse_log_pydantic=pytest parse_log_dvc=pytest " \
        "parse_log_matplotlib=matplotlib parse_log_pytest_options=pytest_options " \
        "parse_log_pydicom=pytest_options parse_log_requests=pytest_options parse_log_pylint=pytest_options " \
        "parse_log_pytest_v2=pytest_v2 parse_log_astropy=pytest_v2 parse_log_scikit=pytest_v2 " \
        "parse_log_sphinx=pytest_v2 parse_log_pytest_nebo=pytest_nebo parse_log_cpp=pytest_cpp " \
        "parse_combined_test_reports=junit_reports parse_log_junit=junit_text parse_log_sbt=junit_text " \
        "parse_logs_r_junit=junit_r parse_log_r_junit=junit_r parse_log_gradlew_v1=junit_gradle " \
        "parse_log_gotest=gotest parse_log_cargo=cargo parse_log_jest=jest parse_log_jest_json=jest_json " \
        "parse_log_vitest=vitest parse_log_karma=karma parse_log_js=mocha parse_log_js_2=mocha_2 " \
        "parse_log_npx=mocha_npx parse_log_js_4=js_marks parse_log_tap=tap parse_log_js_3=tap_nested " \
        "parse_log_maven=maven parse_java_mvn=java_mvn parse_log_java_mvn=java_mvn " \
        "parse_java_mvn_v2=java_mvn_v2 parse_log_java_mvn_v2=java_mvn_v2 " \
        "parse_logs_kotlin_junit=kotlin_junit parse_log_kotlin_junit=kotlin_junit parse_log_ant=ant " \
        "parse_log_gradle_custom=gradle parse_log_phpunit=phpunit parse_log_rspec_transformed_json=rspec " \
        "parse_log_minitest=minitest parse_log_ruby_v1=ruby_v1 parse_log_ruby_v2=ruby_v2 " \
        "parse_log_ruby_unit=ruby_unit parse_log_cucumber=cucumber parse_log_googletest=googletest " \
        "parse_log_cpp_v2=cpp_v2 parse_log_cpp_v4=ctest parse_log_jq=automake parse_log_redis=redis " \
        "parse_log_micropython_test=micropython parse_log_elixir=elixir parse_lue_nvim=nvim " \
        "parse_lua_nvim=nvim parse_log_lua_nvim=nvim parse_log_swift=swift parse_log_csharp=csharp " \
        "parse_log_scala=scala parse_log_ocaml=ocaml", pairs, " ")
    for (i = 1; i <= n; i++) {
        split(pairs[i], kv, "=")
        IMPL[kv[1]] = kv[2]
        NAMES[i] = kv[1]
    }
    if (list) {
        for (i = 1; i <= n; i++) print NAMES[i]
        LISTED = 1
        exit 0
    }
    if (out == "") out = "."
    inside = whole ? 1 : 0
}

{
    line = $0
    sub(/\r$/, "", line)
    if (!whole && line == BEGIN_MARK) { inside = 1; SEEN_MARK = 1; next }
    if (!whole && line == END_MARK) { inside = 0; next }
    if (inside) L[++NL] = $0
}

END {
    if (LISTED) exit 0
    if (!(parser in IMPL)) fail("unknown log parser " q(parser) "; grade.awk -v list=1 prints the supported ones")
    if (!whole && !SEEN_MARK) fail("the log has no test output region (no line " q(BEGIN_MARK) ")")
    NF2P = read_ids(f2p, F2P)
    NP2P = read_ids(p2p, P2P)
    if (NF2P + NP2P == 0) fail("no expected tests: FAIL_TO_PASS and PASS_TO_PASS are both empty")
    run_parser(IMPL[parser])
    # No result at all (the build broke, the runner died): every expected test is MISSING, so the reward
    # is 0, as upstream grades it. An error here would spare a policy that breaks the build its 0.
    if (NORDER == 0) {
        WARNING = "parser " parser " found no test results in " NL " lines of test output"
        WARNING = WARNING ": every expected test counts as MISSING"
        print "grade.awk: warning: " WARNING > "/dev/stderr"
    }
    grade()
    exit 0
}

# ---------------------------------------------------------------------------------------------------
# Grading and output

function fail(msg) {
    print "grade.awk: error: " msg > "/dev/stderr"
    if (out != "") {
        printf "{\"error\": %s, \"parser\": %s}\n", jstr(msg), jstr(parser) > (out "/report.json")
        close(out "/report.json")
    }
    FAILED_RUN = 1
    exit 2
}

function read_ids(file, arr,   n, s) {
    n = 0
    if (file == "") return 0
    while ((getline s < file) > 0) {
        sub(/\r$/, "", s)
        if (s != "") arr[++n] = s
    }
    close(file)
    return n
}

function grade(   i, id, k, f_ok, p_ok, reward, rep, f_frac, p_frac) {
    # Normalise the parsed ids in first-seen order, so when two ids collapse to one, the later wins.
    for (i = 1; i <= NORDER; i++) NST[norm(ORDER[i])] = ST[ORDER[i]]
    f_ok = 0; p_ok = 0
    for (i = 1; i <= NF2P; i++) if ((F2P_ST[i] = status_of(norm(F2P[i]))) == "PASSED") f_ok++
    for (i = 1; i <= NP2P; i++) if ((P2P_ST[i] = status_of(norm(P2P[i]))) == "PASSED") p_ok++
    reward = (f_ok == NF2P && p_ok == NP2P) ? 1 : 0
    f_frac = NF2P ? f_ok / NF2P : 1
    p_frac = NP2P ? p_ok / NP2P : 1

    rep = out "/report.json"
    printf "{\"parser\": %s, \"reward\": %d, \"tests_found\": %d,\n", jstr(parser), reward, NORDER > rep
    if (WARNING != "") printf " \"warning\": %s,\n", jstr(WARNING) > rep
    printf " \"fail_to_pass\": {\"passed\": %d, \"total\": %d, \"tests\": {", f_ok, NF2P > rep
    for (i = 1; i <= NF2P; i++) printf "%s%s: %s", (i > 1 ? ", " : ""), jstr(F2P[i]), jstr(F2P_ST[i]) > rep
    printf "}},\n \"pass_to_pass\": {\"passed\": %d, \"total\": %d, \"tests\": {", p_ok, NP2P > rep
    for (i = 1; i <= NP2P; i++) printf "%s%s: %s", (i > 1 ? ", " : ""), jstr(P2P[i]), jstr(P2P_ST[i]) > rep
    printf "}},\n \"parsed\": {" > rep
    for (i = 1; i <= NORDER; i++) printf "%s%s: %s", (i > 1 ? ",\n  " : "\n  "), jstr(ORDER[i]), jstr(ST[ORDER[i]]) > rep
    printf "}}\n" > rep
    close(rep)
    # reward.json last: a run that dies half-way leaves no reward behind.
    printf "{\"reward\": %d, \"fail_to_pass\": %s, \"pass_to_pass\": %s}\n", reward, num(f_frac), num(p_frac) > (out "/reward.json")
    close(out "/reward.json")
}

function status_of(id) { return (id in NST) ? NST[id] : "MISSING" }

function num(x) { return sprintf("%.10g", x) }

# Upstream strips these timing suffixes from parsed and expected ids alike before comparing.
function norm(s,   done, c) {
    sub(/[ \t\n\r\013\014\034-\037]*[[][ \t\n\r\013\014\034-\037]*[0-9]+([.][0-9]+)?[ \t\n\r\013\014\034-\037]*([mM][sS]|[sS])[ \t\n\r\013\014\034-\037]*[]][ \t\n\r\013\014\034-\037]*$/, "", s)
    done = ""
    while (s ~ /[sS][eE][cC]/ && match(s, /[ \t\n\r\013\014\034-\037]+[iI][nN][ \t\n\r\013\014\034-\037]+[0-9]+([.][0-9]+)?[ \t\n\r\013\014\034-\037]+([mM][sS][eE][cC]|[sS][eE][cC])/)) {
        c = substr(s, RSTART + RLENGTH, 1)
        if (is_word(c)) {
            done = done substr(s, 1, RSTART)
            s = substr(s, RSTART + 1)
        } else {
            done = done substr(s, 1, RSTART - 1)
            s = substr(s, RSTART + RLENGTH)
        }
    }
    s = done s
    sub(/[ \t\n\r\013\014\034-\037]*[(][ \t\n\r\013\014\034-\037]*[0-9]+([.][0-9]+)?[ \t\n\r\013\014\034-\037]*([mM][sS]|[sS])[ \t\n\r\013\014\034-\037]*[)][ \t\n\r\013\014\034-\037]*$/, "", s)
    return strip(s)
}

# A JSON string literal; bytes that are not valid UTF-8 become U+FFFD so the file always parses.
function jstr(s,   out, i, j, c, o, n, k, ok) {
    if (s !~ /["\\\001-\037\177-\377]/) return "\"" s "\""
    if (!ORD_READY) {
        for (i = 1; i < 256; i++) ORD[sprintf("%c", i)] = i
        ORD_READY = 1
    }
    out = ""
    n = length(s)
    for (i = 1; i <= n; i++) {
        c = substr(s, i, 1)
        o = ORD[c]
        if (c == "\"" || c == "\\") out = out "\\" c
        else if (o < 32 || o == 127) out = out sprintf("\\u%04x", o)
        else if (o < 128) out = out c
        else {
            k = (o >= 194 && o <= 223) ? 1 : (o >= 224 && o <= 239) ? 2 : (o >= 240 && o <= 244) ? 3 : 0
            ok = k > 0 && i + k <= n
            for (j = 1; ok && j <= k; j++) if (ORD[substr(s, i + j, 1)] < 128 || ORD[substr(s, i + j, 1)] > 191) ok = 0
            if (ok) { out = out substr(s, i, k + 1); i += k }
            else out = out "\\ufffd"
        }
    }
    return "\"" out "\""
}

function q(s) { return "\"" s "\"" }

# ---------------------------------------------------------------------------------------------------
# Results: upstream parsers fill a dict, so a later report of the same id replaces the status but keeps
# the id's first position; some only set a status when none is there yet (`setdefault`).

function put(id, st) {
    if (!(id in ST)) ORDER[++NORDER] = id
    ST[id] = st
}

function put_new(id, st) { if (!(id in ST)) put(id, st) }

# ---------------------------------------------------------------------------------------------------
# String helpers (Python semantics where the upstream parsers rely on them)

# The helpers below run on every line or id: they try a regex literal first and use the (slower to
# compile, in busybox) Unicode-aware pattern only when a multi-byte character is at stake.
function strip(s) { return rstrip(lstrip(s)) }

function lstrip(s) {
    sub(/^[ \t\n\r\013\014\034-\037]+/, "", s)
    if (s ~ /^[\302\341\342\343]/) sub("^(" WSALT ")+", "", s)
    return s
}

function rstrip(s) {
    sub(/[ \t\n\r\013\014\034-\037]+$/, "", s)
    if (s ~ /[\200-\277]$/) sub("(" WSALT ")+$", "", s)
    return s
}

# str.split() with no argument: runs of whitespace separate, none at either end.
function wsplit(s, arr) {
    if (s ~ /[\t\n\r\013\014\034-\037\302\341\342\343]/) gsub(WSALT, " ", s)
    return split(s, arr, " ")
}

function starts(s, p) { return substr(s, 1, length(p)) == p }

function ends(s, p) { return length(s) >= length(p) && substr(s, length(s) - length(p) + 1) == p }

# Python's \w, with any non-ASCII byte taken as part of a letter.
function is_word(c) { return c ~ /^[A-Za-z0-9_\200-\377]/ }

function last_index(s, t,   i, k, last) {
    last = 0
    while ((k = index(substr(s, last + 1), t)) > 0) last += k
    return last
}

# Match `re` at the start of s: HEAD gets the matched text, TAIL the rest.
function lead(s, re) {
    if (!match(s, "^(" re ")")) return 0
    HEAD = substr(s, 1, RLENGTH)
    TAIL = substr(s, RLENGTH + 1)
    return 1
}

# The earliest split s = NAME SUFFIX with NAME at least `min` bytes and SUFFIX matching `re` (which must
# end with $): what a lazy `(.+?)SUFFIX$` captures.
function lazy_name(s, re, min) {
    if (!match(substr(s, min + 1), re)) return 0
    NAME = substr(s, 1, min + RSTART - 1)
    SUFFIX = substr(s, min + RSTART)
    return 1
}

# Python's splitlines(): besides \n, a lone \r, \v, \f, \x1c-\x1e and the Unicode line separators end a
# line; "\r\n" is one break.
function build_splitlines(   i, k, n, s, parts) {
    if (NSL_READY) return
    NSL_READY = 1
    for (i = 1; i <= NL; i++) {
        s = L[i]
        sub(/\r$/, "", s)
        gsub("\r|\013|\014|\034|\035|\036|\302\205|\342\200\250|\342\200\251", "\n", s)
        n = split(s, parts, "\n")
        if (n == 0) SLN[++NSL] = ""
        for (k = 1; k <= n; k++) SLN[++NSL] = parts[k]
    }
}

# The whole region as one string, joined by halves so long logs cost n log n, not n^2.
function join_lines(lo, hi,   mid) {
    if (lo > hi) return ""
    if (lo == hi) return L[lo]
    mid = int((lo + hi) / 2)
    return join_lines(lo, mid) "\n" join_lines(mid + 1, hi)
}

# ---------------------------------------------------------------------------------------------------
# Dispatch

function run_parser(impl) {
    if (impl == "pytest" || impl == "matplotlib" || impl == "pytest_options") p_pytest(impl)
    else if (impl == "pytest_v2") p_pytest_v2()
    else if (impl == "pytest_nebo") p_pytest_nebo()
    else if (impl == "pytest_cpp") p_pytest_cpp()
    else if (impl == "junit_reports" || impl == "junit_r") p_junit_xml(impl)
    else if (impl == "junit_gradle") p_junit_gradle()
    else if (impl == "junit_text") { junit_text(0) }
    else if (impl == "gotest") p_gotest()
    else if (impl == "cargo") p_cargo()
    else if (impl == "jest") p_jest()
    else if (impl == "jest_json") p_jest_json()
    else if (impl == "vitest") p_vitest()
    else if (impl == "karma") p_karma()
    else if (impl == "mocha" || impl == "mocha_2") p_mocha(impl)
    else if (impl == "mocha_npx") p_mocha_npx()
    else if (impl == "js_marks") p_js_marks()
    else if (impl == "tap") p_tap()
    else if (impl == "tap_nested") p_tap_nested()
    else if (impl == "maven") maven_builds(0)
    else if (impl == "java_mvn") p_java_mvn()
    else if (impl == "java_mvn_v2") p_java_mvn_v2()
    else if (impl == "kotlin_junit") p_kotlin_junit()
    else if (impl == "ant") p_ant()
    else if (impl == "gradle") p_gradle()
    else if (impl == "phpunit") p_phpunit()
    else if (impl == "rspec") p_rspec()
    else if (impl == "minitest") p_minitest()
    else if (impl == "ruby_v1") p_ruby_v1()
    else if (impl == "ruby_v2") p_ruby_v2()
    else if (impl == "ruby_unit") p_ruby_unit()
    else if (impl == "cucumber") p_cucumber()
    else if (impl == "googletest") p_googletest()
    else if (impl == "cpp_v2") p_cpp_v2()
    else if (impl == "ctest") p_ctest()
    else if (impl == "automake") p_automake()
    else if (impl == "redis") p_redis()
    else if (impl == "micropython") p_micropython()
    else if (impl == "elixir") p_elixir()
    else if (impl == "nvim") p_nvim()
    else if (impl == "swift") p_swift()
    else if (impl == "csharp") p_csharp()
    else if (impl == "scala") p_scala()
    else if (impl == "ocaml") p_ocaml()
    else fail("parser " parser " is registered but has no implementation " q(impl))
}

# ---------------------------------------------------------------------------------------------------
# Python: pytest

function status_prefix(s) {
    if (starts(s, "PASSED")) return "PASSED"
    if (starts(s, "FAILED")) return "FAILED"
    if (starts(s, "SKIPPED")) return "SKIPPED"
    if (starts(s, "ERROR")) return "ERROR"
    return ""
}

function status_suffix(s) {
    if (ends(s, "PASSED")) return "PASSED"
    if (ends(s, "FAILED")) return "FAILED"
    if (ends(s, "SKIPPED")) return "SKIPPED"
    if (ends(s, "ERROR")) return "ERROR"
    return ""
}

# `-rA` summary lines: "PASSED tests/test_x.py::test_a", "FAILED tests/test_x.py::test_b - assert 0".
# The id is the second word; the status is the first word as printed.
function p_pytest(impl,   i, s, st, n, f, id) {
    for (i = 1; i <= NL; i++) {
        s = L[i]
        if (impl == "matplotlib") {
            gsub(/MouseButton[.]LEFT/, "1", s)
            gsub(/MouseButton[.]RIGHT/, "3", s)
        }
        st = status_prefix(s)
        if (st == "") continue
        if (st == "FAILED") gsub(/ - /, " ", s)
        n = wsplit(s, f)
        if (n <= 1) continue
        id = f[2]
        if (impl == "pytest_options") id = pytest_option_id(id)
        put(id, f[1])
    }
}

# Parametrised ids whose parameter is an absolute path keep only its last component.
function pytest_option_id(id,   a, b, opt, n, seg) {
    a = index(id, "[")
    b = last_index(id, "]")
    if (a == 0 || b <= a) return id
    opt = substr(id, a + 1, b - a - 1)
    if (starts(opt, "/") && !starts(opt, "//") && index(opt, "*") == 0) {
        n = split(opt, seg, "/")
        opt = "/" seg[n]
    }
    return substr(id, 1, a - 1) "[" opt "]"
}

# Colour codes and control characters removed; "STATUS id" or, from old verbose output, "id STATUS".
function p_pytest_v2(   i, s, n, f) {
    for (i = 1; i <= NL; i++) {
        s = L[i]
        gsub(/\[[0-9]+m/, "", s)
        gsub(/[\001-\037]/, "", s)
        if (status_prefix(s) != "") {
            if (starts(s, "FAILED")) gsub(/ - /, " ", s)
            n = wsplit(s, f)
            if (n >= 2) put(f[2], f[1])
        } else if (status_suffix(s) != "") {
            n = wsplit(s, f)
            if (n >= 2) put(f[1], f[2])
        }
    }
}

# xdist "[gw0] [ 10%] PASSED id", verbose "id PASSED [ 10%] in 0.01s", or "PASSED id"; " in <time>" cut.
function p_pytest_nebo(   i, s, st, name, word) {
    build_splitlines()
    for (i = 1; i <= NSL; i++) {
        s = SLN[i]
        gsub(/\[[0-9]+m/, "", s)
        gsub(/[\001-\037]/, "", s)
        s = strip(s)
        if (lead(s, "[[]gw[0-9]+[]]" SP "+[[][^]]*[]]" SP "+")) {
            if (lead(TAIL, "[A-Za-z0-9_]+")) {
                word = HEAD
                if (lead(TAIL, SP "+") && (word == "PASSED" || word == "FAILED" || word == "SKIPPED" || word == "ERROR")) {
                    put(strip(before(TAIL, " in ")), word)
                    continue
                }
            }
        }
        if (lazy_name(s, SP "+(PASSED|FAILED|SKIPPED|ERROR)" SP "+[[][^]]*[]]" SP "+in" SP "+[0-9]+([.][0-9]+)?s$", 1) \
            && NAME !~ "^" SP) {
            st = SUFFIX
            sub("^" SP "+", "", st)
            sub(SP ".*", "", st)
            put(strip(NAME), st)
            continue
        }
        st = status_prefix(s)
        if (st != "" && lead(substr(s, length(st) + 1), SP "+")) put(strip(before(TAIL, " in ")), st)
    }
}

function before(s, sep,   k) {
    k = index(s, sep)
    return k ? substr(s, 1, k - 1) : s
}

# Verbose lines "path::Class::test PASSED" keyed by the part after the last "::"; the FAILURES section's
# "____ test ____" headers mark failures, and nothing after that section starts is read as a result.
function p_pytest_cpp(   i, s, st, in_failures, name, k, u) {
    build_splitlines()
    u = "___________________________"
    for (i = 1; i <= NSL; i++) {
        s = strip(SLN[i])
        if (s == "") continue
        if (starts(s, "=================================== FAILURES ===================================")) {
            in_failures = 1
            continue
        }
        if (in_failures) {
            if (starts(s, u " ") && ends(s, " " u) && length(s) >= 2 * length(u) + 2)
                put(substr(s, length(u) + 2, length(s) - 2 * length(u) - 2), "FAILED")
            continue
        }
        for (k = 1; k <= 4; k++) {
            st = k == 1 ? "PASSED" : k == 2 ? "FAILED" : k == 3 ? "SKIPPED" : "ERROR"
            if (match(s, SP "+" st)) {
                name = substr(s, 1, RSTART - 1)
                if (index(name, "::")) name = substr(name, last_index(name, "::") + 2)
                if (st == "PASSED") put_new(name, st)
                else put(name, st)
                break
            }
        }
    }
}

# ---------------------------------------------------------------------------------------------------
# JUnit XML
#
# Three upstream flavours: documents from "<?xml" to "</testsuites>" parsed as XML ("class::name"), the
# first such document with testcases directly under a <testsuite> ("class::name" or "name"), Gradle's
# per-line blocks ending "</testsuite>" ("name (class)"), and a tolerant text scan of every <testcase>
# tag ("class name"). The XML flavours drop a document that is not well-formed, as an XML parser would.

function p_junit_xml(impl,   np, k, lo, hi) {
    LOG = join_lines(1, NL)
    np = split(LOG, P, "<")
    for (k = 2; k <= np; k++) {
        if (!starts(P[k], "?xml")) continue
        lo = k
        for (hi = lo + 1; hi <= np && !starts(P[hi], "/testsuites>"); hi++) ;
        if (impl == "junit_r") {
            if (hi > np ? xml_doc(P, lo, np, 0) : xml_doc(P, lo, hi, 1)) commit_testcases(impl)
            return
        }
        if (hi > np) continue
        if (xml_doc(P, lo, hi, 1)) commit_testcases(impl)
        k = hi
    }
}

function p_junit_gradle(   i, j, s, doc, np, parts) {
    for (i = 1; i <= NL; i++) {
        if (!starts(strip(L[i]), "<?xml")) continue
        for (j = i + 1; j <= NL && !starts(strip(L[j]), "<?xml") && !starts(strip(L[j]), "</testsuite>"); j++) ;
        if (j > NL) break
        if (starts(strip(L[j]), "<?xml")) { i = j - 1; continue }
        doc = join_range(i, j)
        np = split(doc, parts, "<")
        # Nothing may precede the XML declaration.
        if (parts[1] == "" && xml_doc(parts, 2, np, 0)) commit_testcases("junit_gradle")
        i = j
    }
}

function join_range(lo, hi,   mid) {
    if (lo == hi) return L[lo]
    mid = int((lo + hi) / 2)
    return join_range(lo, mid) "\n" join_range(mid + 1, hi)
}

function commit_testcases(impl,   t, id, st) {
    for (t = 1; t <= TCN; t++) {
        if (TC_ROOT[t]) continue
        if (impl == "junit_r" && (TC_PARENT[t] != "testsuite" || TC_PARENT_ROOT[t])) continue
        if (impl == "junit_reports") {
            id = (TC_HASC[t] ? TC_CLASS[t] : "None") "::" (TC_HASN[t] ? TC_NAME[t] : "None")
            st = TC_F[t] ? "FAILED" : TC_S[t] ? "SKIPPED" : TC_E[t] ? "ERROR" : "PASSED"
        } else if (impl == "junit_r") {
            id = TC_CLASS[t] != "" ? TC_CLASS[t] "::" TC_NAME[t] : TC_NAME[t]
            st = TC_F[t] ? "FAILED" : TC_E[t] ? "ERROR" : TC_S[t] ? "SKIPPED" : "PASSED"
        } else {
            id = (TC_CLASS[t] != "" && TC_NAME[t] != "") ? TC_NAME[t] " (" TC_CLASS[t] ")" : TC_NAME[t]
            st = TC_S[t] ? "SKIPPED" : TC_F[t] ? "FAILED" : TC_E[t] ? "ERROR" : "PASSED"
        }
        put(id, st)
    }
}

# Read parts A[lo..hi] (the text after each "<") as one XML document and collect its <testcase>
# elements into TC_*. Returns 0 when the document is not well-formed. With `cut`, only the tag that
# opens A[hi] belongs to the document.
function xml_doc(A, lo, hi, cut,   k, s, j, mode, depth, t, name, selfclose, rest, stk, tcs, root_done, text) {
    TCN = 0
    depth = 0
    mode = ""
    root_done = 0
    for (k = lo; k <= hi; k++) {
        s = A[k]
        if (k == hi && cut) s = substr(s, 1, index(s, ">"))
        if (s ~ /[\001-\010\013\014\016-\037]/) return 0
        if (index(s, "\r")) gsub(/\r\n?/, "\n", s)
        if (mode != "") {
            j = index(s, mode)
            if (!j) continue
            text = substr(s, j + length(mode))
            mode = ""
        } else if (starts(s, "!--")) {
            j = index(substr(s, 4), "-->")
            if (!j) { mode = "-->"; continue }
            text = substr(s, j + 6)
        } else if (starts(s, "![CDATA[")) {
            if (depth == 0) return 0
            j = index(s, "]]>")
            if (!j) { mode = "]]>"; continue }
            text = substr(s, j + 3)
        } else if (starts(s, "?")) {
            if (tolower(substr(s, 2, 3)) == "xml" && substr(s, 5, 1) ~ /^[ \t\n\r?]$/ && k != lo) return 0
            j = index(s, "?>")
            if (!j) { mode = "?>"; continue }
            text = substr(s, j + 2)
        } else if (starts(s, "!DOCTYPE")) {
            j = index(s, ">")
            if (!j || depth > 0 || root_done || index(substr(s, 1, j), "[")) return 0
            text = substr(s, j + 1)
        } else if (starts(s, "/")) {
            j = index(s, ">")
            if (!j) return 0
            name = substr(s, 2, j - 2)
            sub(/[ \t\n\r]+$/, "", name)
            if (depth == 0 || name != stk[depth]) return 0
            if (tcs[depth]) TC_DONE[tcs[depth]] = 1
            depth--
            if (depth == 0) root_done = 1
            text = substr(s, j + 1)
        } else {
            j = tag_end(s)
            if (!j || root_done) return 0
            t = substr(s, 1, j - 1)
            selfclose = sub(/\/$/, "", t)
            if (!match(t, /^[A-Za-z_:\200-\377][-A-Za-z0-9._:\200-\377]*/)) return 0
            name = substr(t, 1, RLENGTH)
            if (!xml_attrs(substr(t, RLENGTH + 1))) return 0
            # A failure/skipped/error element directly inside a testcase marks that testcase.
            if (depth > 0 && tcs[depth]) {
                if (name == "failure") TC_F[tcs[depth]] = 1
                else if (name == "skipped") TC_S[tcs[depth]] = 1
                else if (name == "error") TC_E[tcs[depth]] = 1
            }
            depth++
            stk[depth] = name
            tcs[depth] = 0
            if (name == "testcase") {
                tcs[depth] = ++TCN
                # Test membership before reading: reading an awk array element creates it.
                TC_HASN[TCN] = ("name" in ATTR); TC_NAME[TCN] = ATTR["name"]
                TC_HASC[TCN] = ("classname" in ATTR); TC_CLASS[TCN] = ATTR["classname"]
                TC_F[TCN] = TC_S[TCN] = TC_E[TCN] = 0
                TC_ROOT[TCN] = depth == 1
                TC_PARENT[TCN] = depth > 1 ? stk[depth - 1] : ""
                TC_PARENT_ROOT[TCN] = depth == 2
            }
            if (selfclose) {
                depth--
                if (depth == 0) root_done = 1
            }
            text = substr(s, j + 1)
        }
        if (depth == 0) {
            if (text !~ /^[ \t\n\r]*$/) return 0
        } else if (!xml_refs_ok(text)) return 0
    }
    return mode == "" && depth == 0 && root_done
}

# Position of the ">" that ends the tag at the start of s (">" may appear inside quoted values).
function tag_end(s,   j, k, t, rest, qc) {
    j = 0
    while ((k = index(substr(s, j + 1), ">")) > 0) {
        j += k
        t = substr(s, 1, j - 1)
        qc = ""
        while (match(t, /["']/)) {
            if (qc == "") qc = substr(t, RSTART, 1)
            else if (substr(t, RSTART, 1) == qc) qc = ""
            t = substr(t, RSTART + 1)
        }
        if (qc == "") return j
    }
    return 0
}

# Parse ` a="1" b='2'` into ATTR (values decoded); 0 when malformed.
function xml_attrs(s,   name, qc, j, v) {
    split("", ATTR)
    while (1) {
        if (!match(s, /^[ \t\n\r]+/)) return s == ""
        s = substr(s, RLENGTH + 1)
        if (s == "") return 1
        if (!match(s, /^[A-Za-z_:\200-\377][-A-Za-z0-9._:\200-\377]*/)) return 0
        name = substr(s, 1, RLENGTH)
        s = substr(s, RLENGTH + 1)
        if (!match(s, /^[ \t\n\r]*=[ \t\n\r]*/)) return 0
        s = substr(s, RLENGTH + 1)
        qc = substr(s, 1, 1)
        if (qc != "\"" && qc != "'") return 0
        j = index(substr(s, 2), qc)
        if (!j) return 0
        v = substr(s, 2, j - 1)
        s = substr(s, j + 2)
        if (name in ATTR || !xml_refs_ok(v)) return 0
        gsub(/[\t\n]/, " ", v)
        ATTR[name] = xml_decode(v)
    }
}

function xml_refs_ok(s) {
    while (match(s, /&/)) {
        s = substr(s, RSTART)
        if (!match(s, /^&(lt|gt|amp|quot|apos|#[0-9]+|#x[0-9A-Fa-f]+);/)) return 0
        if (substr(s, 2, 1) == "#" && !xml_char_ok(ref_code(substr(s, 3, RLENGTH - 3)))) return 0
        s = substr(s, RLENGTH + 1)
    }
    return 1
}

function ref_code(r,   i, v, h) {
    if (substr(r, 1, 1) != "x") return r + 0
    v = 0
    for (i = 2; i <= length(r); i++) v = v * 16 + index("0123456789abcdef", tolower(substr(r, i, 1))) - 1
    return v
}

function xml_char_ok(c) {
    return c == 9 || c == 10 || c == 13 || (c >= 32 && c <= 55295) || (c >= 57344 && c <= 65533) \
        || (c >= 65536 && c <= 1114111)
}

function xml_decode(s,   out, r) {
    if (!index(s, "&")) return s
    out = ""
    while (match(s, /&(lt|gt|amp|quot|apos|#[0-9]+|#x[0-9A-Fa-f]+);/)) {
        r = substr(s, RSTART + 1, RLENGTH - 2)
        out = out substr(s, 1, RSTART - 1)
        if (r == "lt") out = out "<"
        else if (r == "gt") out = out ">"
        else if (r == "amp") out = out "&"
        else if (r == "quot") out = out "\""
        else if (r == "apos") out = out "'"
        else out = out utf8(ref_code(substr(r, 2)))
        s = substr(s, RSTART + RLENGTH)
    }
    return out s
}

function utf8(c) {
    if (c < 128) return sprintf("%c", c)
    if (c < 2048) return sprintf("%c%c", 192 + int(c / 64), 128 + c % 64)
    if (c < 65536) return sprintf("%c%c%c", 224 + int(c / 4096), 128 + int(c / 64) % 64, 128 + c % 64)
    return sprintf("%c%c%c%c", 240 + int(c / 262144), 128 + int(c / 4096) % 64, 128 + int(c / 64) % 64, 128 + c % 64)
}

# Every "<testcase" tag in the raw text, well-formed or not: attributes name="..." classname="..." taken
# verbatim, the status from the first <failure, <error or <skipped before "</testcase>" (or within 4096
# bytes when it never closes). `only_new` keeps statuses already set (a fallback for other parsers).
function junit_text(only_new,   k, m, s, attrs, j, id, st, name, cls, closed, win, c, rest, f, e, sk) {
    if (!P_READY) {
        LOG = join_lines(1, NL)
        NP = split(LOG, P, "<")
        P_READY = 1
    }
    for (k = 2; k <= NP; k++) {
        s = P[k]
        if (!starts(s, "testcase") || is_word(substr(s, 9, 1))) continue
        # The attributes run to the first ">", across any "<" in between.
        attrs = substr(s, 9)
        m = k
        while (!(j = index(attrs, ">")) && m < NP) attrs = attrs "<" P[++m]
        if (!j) break
        rest = substr(attrs, j + 1)
        attrs = substr(attrs, 1, j - 1)
        text_attrs(attrs)
        if (!("name" in ATTR) || ATTR["name"] == "") { k = m; continue }
        name = ATTR["name"]
        cls = ("classname" in ATTR) ? ATTR["classname"] : ""
        st = "PASSED"
        if (rstrip(attrs) ~ /\/$/) {
            k = m
        } else {
            closed = 0
            for (c = m + 1; c <= NP; c++) if (starts(P[c], "/testcase>")) { closed = c; break }
            # Without a closing tag upstream looks at the next 4096 characters only; `win` is the
            # offset of the "<" that starts part c.
            win = length(rest)
            f = e = sk = 0
            for (c = m + 1; c <= NP && (closed ? c < closed : win < 4096); c++) {
                if (starts(P[c], "failure") && (closed || win + 8 <= 4096)) f = 1
                else if (starts(P[c], "error") && (closed || win + 6 <= 4096)) e = 1
                else if (starts(P[c], "skipped") && (closed || win + 8 <= 4096)) sk = 1
                win += 1 + length(P[c])
            }
            st = f ? "FAILED" : e ? "ERROR" : sk ? "SKIPPED" : "PASSED"
            k = closed ? closed : m
        }
        id = cls != "" ? strip(cls " " name) : name
        if (only_new) put_new(id, st)
        else put(id, st)
    }
}

function text_attrs(s,   v) {
    split("", ATTR)
    while (match(s, /[A-Za-z0-9_]+="[^"]*"/)) {
        v = substr(s, RSTART, RLENGTH)
        s = substr(s, RSTART + RLENGTH)
        ATTR[substr(v, 1, index(v, "=") - 1)] = substr(v, index(v, "=") + 2, length(v) - index(v, "=") - 2)
    }
}

# ---------------------------------------------------------------------------------------------------
# Go, Rust

# "--- PASS: TestName/sub_case (0.01s)"; the name runs to the last " (".
function p_gotest(   i, s, st, rest, p) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        if (!lead(s, "--- (PASS|FAIL|SKIP): ")) continue
        st = substr(HEAD, 5, 4)
        rest = TAIL
        if (!ends(rest, ")")) continue
        p = last_index(substr(rest, 1, length(rest) - 2), " (")
        if (p < 2) continue
        put(substr(rest, 1, p - 1), st == "PASS" ? "PASSED" : st == "FAIL" ? "FAILED" : "SKIPPED")
    }
}

# "test path::to::case ... ok" / "... FAILED"; ignored tests are not reported.
function p_cargo(   i, s, n, f) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        if (!match(s, "^test" SP "+[^ \t\n\r\013\014\034-\037]+" SP "+[.][.][.]" SP "+[A-Za-z0-9_]+$")) continue
        n = wsplit(s, f)
        if (f[n] == "ok") put(f[2], "PASSED")
        else if (f[n] == "FAILED") put(f[2], "FAILED")
    }
}

# ---------------------------------------------------------------------------------------------------
# JavaScript

# Jest --verbose: "✓ name (5 ms)", "✕ name", "○ skipped name".
function p_jest(   i, s, mark, rest) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        mark = starts(s, CHECK) ? "PASSED" : starts(s, MULT_X) ? "FAILED" : starts(s, CIRCLE) ? "SKIPPED" : ""
        if (mark == "" || !lead(substr(s, 4), SP)) continue
        rest = TAIL
        if (rest == "") continue
        if (lazy_name(rest, SP "[(][0-9]+" SP "*m?s[)]$", 1)) rest = NAME
        put(rest, mark)
    }
}

function p_jest_json(   i, s) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        if (lead(s, "[[](PASSED|FAILED)[]]" SP) && TAIL != "") put(TAIL, substr(HEAD, 2, 6))
    }
}

# Vitest verbose: "✓ file > suite > name 12ms", "× name", "↓ name [skipped]"; a trailing number is cut.
function p_vitest(   i, s, mark, rest, len) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        if (starts(s, CHECK)) { mark = "PASSED"; len = 3 }
        else if (starts(s, TIMES)) { mark = "FAILED"; len = 2 }
        else if (starts(s, DOWN_ARROW)) { mark = "SKIPPED"; len = 3 }
        else continue
        if (!lead(substr(s, len + 1), SP)) continue
        rest = TAIL
        if (rest == "") continue
        if (lazy_name(rest, SP "([0-9]+" SP "*m?s?|[[]skipped[]])$", 1)) rest = NAME
        put(rest, mark)
    }
}

# Karma: indented suite lines build a " > " path for the ✔/✖ lines below them, after "Starting browser".
function p_karma(   i, s, started, indent, mark, name, cur, depth, suite, full, d) {
    cur = -1
    depth = 0
    for (i = 1; i <= NL; i++) {
        s = L[i]
        if (starts(s, "SUMMARY:")) return
        if (index(s, "Starting browser")) { started = 1; continue }
        if (!started) continue
        # `^(\s*)?([✔✖])?\s(.*)$`: a mark followed by a space, or else the last leading space is the
        # one the pattern requires (so the indent is one shorter and the name is what follows).
        match(s, "^" SP "*")
        indent = RLENGTH
        s = substr(s, RLENGTH + 1)
        mark = starts(s, HEAVY_CHECK) ? "PASSED" : starts(s, HEAVY_X) ? "FAILED" : ""
        if (mark != "" && substr(s, 4, 1) ~ ("^" SP "$")) name = substr(s, 5)
        else if (indent > 0) { mark = ""; indent--; name = s }
        else continue
        if (indent > 0 && mark == "") {
            if (indent > cur) { cur = indent; suite[++depth] = name }
            else if (indent < cur) { cur = indent; if (depth > 0) depth--; continue }
        }
        if (mark != "") {
            full = ""
            for (d = 1; d <= depth; d++) full = full suite[d] " > "
            put(full name, mark)
        }
    }
}

# A trailing duration like "(53ms)", " 2s" or "1.5 ms" is not part of a JavaScript test name.
function js_name(s) {
    if (match(s, SP "*([(]" SP "*)?[0-9]+([.][0-9]+)?" SP "*([mM][sS]|[sS])" SP "*[)]?" SP "*$")) s = substr(s, 1, RSTART - 1)
    return strip(s)
}

# Mocha spec reporter. parse_log_js: "✔ name", "- pending", "1) name:" and "[W] 1) name" failures;
# parse_log_js_2: "✔ name", "- pending", "1) name" (no colon needed).
function p_mocha(impl,   i, s, name) {
    build_splitlines()
    for (i = 1; i <= NSL; i++) {
        s = strip(SLN[i])
        if (s == "") continue
        if (lead(s, "-" SP "+")) {
            name = js_name(TAIL)
            if (name != "") put(name, "SKIPPED")
            continue
        }
        if (impl == "mocha") {
            if (lead(s, "[0-9]+[)]" SP "+") && ends(TAIL, ":")) {
                name = js_name(substr(TAIL, 1, length(TAIL) - 1))
                if (name != "") put(name, "FAILED")
                continue
            }
            if (lead(s, "[[]W[]]" SP "*[0-9]+[)]" SP "+")) {
                name = js_name(rstrip(TAIL))
                if (name != "") put(name, "FAILED")
                continue
            }
        } else if (lead(s, "[0-9]+[)]" SP "+")) {
            name = js_name(TAIL)
            if (name != "") put(name, "FAILED")
            continue
        }
        if (starts(s, HEAVY_CHECK) && lead(substr(s, 4), SP "+")) {
            name = js_name(TAIL)
            if (name != "") put_new(name, "PASSED")
        }
    }
}

# npx mocha: "✔ name (12ms)" passes, "1) name" fails (a trailing "(...)" dropped); later lines win.
function p_mocha_npx(   i, s, name) {
    build_splitlines()
    for (i = 1; i <= NSL; i++) {
        s = rstrip(SLN[i])
        if (strip(s) == "") continue
        if (lead(s, SP "*" HEAVY_CHECK SP "+") && TAIL != "") {
            name = TAIL
            if (lazy_name(name, SP "+[(][0-9]+(ms)?[)]$", 1)) name = NAME
            put(strip(name), "PASSED")
            continue
        }
        if (lead(s, SP "*[0-9]+[)]" SP "+") && TAIL != "") {
            name = strip(TAIL)
            sub(SP "+[(][^)]+[)]$", "", name)
            put(name, "FAILED")
        }
    }
}

# Runners that start result lines with a mark: ✔ ✓ pass, ✘ ✖ × fail, ○ ◌ ◦ ⚪ skip, or that tag a line
# "(skipped)", "[skip]", "[skipped]", "[pending]" or "[todo]".
function p_js_marks(   i, s, lower, mark, len, name, k, markers, nm) {
    build_splitlines()
    nm = split("(skipped) [skip] [skipped] [pending] [todo]", markers, " ")
    for (i = 1; i <= NSL; i++) {
        s = strip(SLN[i])
        if (s == "") continue
        mark = ""
        if (starts(s, HEAVY_CHECK) || starts(s, CHECK)) { mark = "PASSED"; len = 3 }
        else if (starts(s, BALLOT_X) || starts(s, HEAVY_X)) { mark = "FAILED"; len = 3 }
        else if (starts(s, TIMES)) { mark = "FAILED"; len = 2 }
        else if (starts(s, CIRCLE) || starts(s, DOTTED_CIRCLE) || starts(s, WHITE_BULLET) || starts(s, WHITE_CIRCLE)) { mark = "SKIPPED"; len = 3 }
        if (mark != "") {
            name = js_name(untag(strip(substr(s, len + 1))))
            if (name == "") continue
            if (mark == "PASSED") put_new(name, mark)
            else put(name, mark)
            continue
        }
        lower = tolower(s)
        for (k = 1; k <= nm; k++) if (index(lower, markers[k])) break
        if (k > nm) continue
        for (k = 1; k <= nm; k++) s = replace_all(s, markers[k], "")
        name = js_name(s)
        if (name != "") put(name, "SKIPPED")
    }
}

# "[tag]: name" -> "name"; a leading ":" dropped.
function untag(s,   j) {
    if (starts(s, "[") && (j = index(s, "]:")) > 0) s = strip(substr(s, j + 2))
    if (starts(s, ":")) s = strip(substr(s, 2))
    return s
}

function replace_all(s, t, r,   out, k) {
    out = ""
    while ((k = index(s, t)) > 0) {
        out = out substr(s, 1, k - 1) r
        s = substr(s, k + length(t))
    }
    return out s
}

# ---------------------------------------------------------------------------------------------------
# TAP

# "ok 1 - name" / "not ok 2 - name": the id is everything after the number.
function p_tap(   i, s) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        if (lead(s, "(ok|not ok) [0-9]+ ") && TAIL != "") put(TAIL, starts(HEAD, "ok") ? "PASSED" : "FAILED")
    }
}

# TAP with "{ ... }" blocks: names nest as "outer :: inner"; a failure is never overwritten by a pass.
function p_tap_nested(   i, s, opens, name, full, d, depth, stack, st, n, raw, lowered) {
    build_splitlines()
    depth = 0
    for (i = 1; i <= NSL; i++) {
        s = strip(SLN[i])
        if (s == "") continue
        if (s ~ /^}+$/) {
            for (n = length(s); n > 0 && depth > 0; n--) depth--
            continue
        }
        opens = ends(s, "{")
        if (opens) s = rstrip(substr(s, 1, length(s) - 1))
        if (!lead(s, "(not ok|ok)" SP "+[0-9]+" SP "+-" SP "+")) continue
        st = starts(HEAD, "ok") ? "PASSED" : "FAILED"
        raw = TAIL
        if (match(raw, SP "+#")) raw = substr(raw, 1, RSTART - 1)
        name = js_name(raw)
        if (name == "") continue
        lowered = tolower(raw)
        if (index(lowered, "# skip") || index(lowered, "# todo")) st = "SKIPPED"
        full = ""
        for (d = 1; d <= depth; d++) full = full stack[d] " :: "
        full = full name
        if (st != "PASSED" || !(full in ST)) put(full, st)
        if (opens) stack[++depth] = name
    }
}

# ---------------------------------------------------------------------------------------------------
# Java, Kotlin: Maven, Gradle, Ant

# `mvn -Dtest=Name` runs: the last -Dtest= value seen names the next "BUILD SUCCESS|FAILURE".
function maven_builds(only_new,   i, s, cur, k, v) {
    cur = "---NO TEST NAME FOUND YET---"
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        v = s
        while ((k = last_index(v, "-Dtest=")) > 0) {
            if (match(substr(v, k + 7), /^[^ \t\n\r\013\014\034-\037]+/)) {
                cur = substr(v, k + 7, RLENGTH)
                break
            }
            v = substr(v, 1, k - 1)
        }
        if (ends(s, "BUILD SUCCESS") || ends(s, "BUILD FAILURE")) {
            if (only_new) put_new(cur, ends(s, "SUCCESS") ? "PASSED" : "FAILED")
            else put(cur, ends(s, "SUCCESS") ? "PASSED" : "FAILED")
        }
    }
}

# Surefire: "[ERROR] pkg.Class.method:42 ..." fails a method (ERROR when an exception other than an
# assertion is named); "Tests run: ... in pkg.Class" (or after "Running pkg.Class") gives the class.
function p_java_mvn(   i, s, cur, seen, nseen, st, cls, c, counts) {
    build_splitlines()
    cur = ""
    nseen = 0
    for (i = 1; i <= NSL; i++) {
        s = strip(SLN[i])
        if (s == "") continue
        if (match(s, "^([[]INFO[]]" SP "+)?Running" SP "+[A-Za-z0-9_$.]+$")) {
            cur = s
            sub("^([[]INFO[]]" SP "+)?Running" SP "+", "", cur)
            if (!(cur in seen)) seen[cur] = ++nseen
            continue
        }
        if (mvn_failure(s)) {
            put(MVN_CLASS "." MVN_METHOD, (index(s, "Exception") && !index(s, "AssertionError")) ? "ERROR" : "FAILED")
            put_new(MVN_CLASS, "FAILED")
            continue
        }
        if (surefire_counts(s, counts)) {
            if (index(s, " in ")) {
                cls = strip(substr(s, last_index(s, " in ") + 4))
                sub(/[.:;]+$/, "", cls)
            } else cls = cur
            if (cls != "") {
                st = (counts[2] == 0 && counts[3] == 0) ? (counts[4] == 0 ? "PASSED" : "SKIPPED") : "FAILED"
                put_new(cls, st)
            }
            cur = ""
        }
    }
    junit_text(1)
    maven_builds(1)
    if (NORDER == 0) for (c in seen) put_new(c, "PASSED")
}

function surefire_counts(s, counts,   t) {
    if (!match(s, "Tests run:" SP "*[0-9]+," SP "*Failures:" SP "*[0-9]+," SP "*Errors:" SP "*[0-9]+," SP "*Skipped:" SP "*[0-9]+")) return 0
    t = substr(s, RSTART, RLENGTH)
    gsub(/[^0-9]+/, " ", t)
    return split(t, counts, " ") == 4
}

# "[ERROR] <class>.<method>[:<line>]" with Python's backtracking: the class takes as many dotted
# segments as possible, the method is the shortest name ending at a word boundary.
function mvn_failure(s,   rest, run, p, k, n, nxt, dig) {
    if (!lead(s, "[[]ERROR[]]" SP "+")) return 0
    rest = TAIL
    match(rest, /^[A-Za-z0-9_$.]*/)
    run = substr(rest, 1, RLENGTH)
    n = length(run)
    for (p = n; p >= 2; p--) {
        if (substr(run, p, 1) != ".") continue
        for (k = 1; p + k <= n; k++) {
            nxt = substr(rest, p + k + 1, 1)
            if (nxt == ":" && match(substr(rest, p + k + 2), /^[0-9]+/)) {
                dig = RLENGTH
                if (!is_word(substr(rest, p + k + 2 + dig, 1))) break
            }
            if (is_word(substr(run, p + k, 1)) != is_word(nxt)) break
        }
        if (p + k <= n) {
            MVN_CLASS = substr(run, 1, p - 1)
            MVN_METHOD = substr(run, p + 1, k)
            return 1
        }
    }
    return 0
}

# Maven reactor summary "[INFO] Module name ...... SUCCESS [ 1.2 s]" per module, plus "__suite__" from
# the first "Tests run:" line.
function p_java_mvn_v2(   i, s, st, counts) {
    build_splitlines()
    for (i = 1; i <= NSL; i++) {
        s = strip(SLN[i])
        if (s == "") continue
        if (lead(s, "[[]INFO[]]" SP "+") && lazy_name(TAIL, SP "+[.][.]+" SP "+(SUCCESS|FAILURE|SKIPPED)(" SP "|[[]|$)", 1)) {
            st = SUFFIX
            sub(/^[^A-Z]*/, "", st)
            st = substr(st, 1, 7)
            put(NAME, st == "SUCCESS" ? "PASSED" : st == "FAILURE" ? "FAILED" : "SKIPPED")
            continue
        }
        if (surefire_counts(s, counts)) {
            st = counts[2] > 0 ? "FAILED" : counts[3] > 0 ? "ERROR" : counts[4] == counts[1] ? "SKIPPED" : "PASSED"
            put_new("__suite__", st)
        }
    }
}

# Plain "Running <class>" followed by "Tests run: N, Failures: F, Errors: E, Skipped: S".
function p_kotlin_junit(   i, s, cur, counts) {
    build_splitlines()
    cur = ""
    for (i = 1; i <= NSL; i++) {
        s = strip(SLN[i])
        if (s == "") continue
        if (lead(s, "Running" SP "+") && TAIL != "") { cur = TAIL; continue }
        if (match(s, "^Tests run:" SP "+[0-9]+," SP "+Failures:" SP "+[0-9]+," SP "+Errors:" SP "+[0-9]+," SP "+Skipped:" SP "+[0-9]+")) {
            if (cur != "" && surefire_counts(s, counts)) {
                put(cur, (counts[2] > 0 || counts[3] > 0) ? "FAILED" : counts[4] > 0 ? "SKIPPED" : "PASSED")
                cur = ""
            }
        }
    }
}

function p_ant(   i, s, st) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        if (!lead(s, "[[]junit[]]" SP "+[[](PASS|FAIL|ERR)[]]" SP "+")) continue
        st = index(HEAD, "[PASS]") ? "PASSED" : "FAILED"
        put(TAIL, st)
    }
}

# Gradle test logging: "com.acme.FooTest > bar() PASSED" (optionally " (0.1s)").
function p_gradle(   i, s) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        if (starts(s, ">")) continue
        if (lazy_name(s, SP "+(PASSED|FAILED)(" SP "+[(][0-9]+([.][0-9]+)?s[)])?$", 2)) {
            put(NAME, index(SUFFIX, "PASSED") ? "PASSED" : "FAILED")
        }
    }
}

# ---------------------------------------------------------------------------------------------------
# PHP, Ruby

# PHPUnit --testdox: a "Suite (Full\Class)" line, then "✔ name", "✘ name", "↩ name"; id "Suite > name".
function p_phpunit(   i, s, suite, mark, name, p) {
    suite = "None"
    for (i = 1; i <= NL; i++) {
        s = L[i]
        if (s ~ /^[A-Za-z0-9_]/ && ends(s, ")")) {
            p = last_index(substr(s, 1, length(s) - 2), " (")
            if (p >= 3) {
                suite = substr(s, 1, p - 1)
                continue
            }
        }
        match(s, "^" SP "*")
        s = substr(s, RLENGTH + 1)
        mark = starts(s, HEAVY_CHECK) ? "PASSED" : starts(s, BALLOT_X) ? "FAILED" : starts(s, RETURN_ARROW) ? "SKIPPED" : ""
        if (mark == "") continue
        name = substr(s, 4)
        sub("^" SP "*", "", name)
        sub(SP "*[[]" SP "*[0-9]+([.][0-9]+)?" SP "*([mM][sS]|[sS])" SP "*[]]" SP "*$", "", name)
        put(suite " > " strip(name), mark)
    }
}

# "<description> - passed|failed": the last such marker on the line.
function p_rspec(   i, s, p, a, b) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        a = last_index(s, " - passed")
        b = last_index(s, " - failed")
        p = a > b ? a : b
        if (p >= 2) put(substr(s, 1, p - 1), p == a ? "PASSED" : "FAILED")
    }
}

# "<name>. ... = ... <mark>": the last ".", "F" or "E" after an "=" is the outcome.
function p_minitest(   i, s, lastc, c, e, d, k, name) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        lastc = 0
        for (k = length(s); k >= 1; k--) {
            c = substr(s, k, 1)
            if (c == "." || c == "F" || c == "E") { lastc = k; break }
        }
        if (!lastc) continue
        e = last_index(substr(s, 1, lastc - 1), "=")
        if (!e) continue
        d = last_index(substr(s, 1, e - 1), ". ")
        if (d < 2) continue
        name = substr(s, 1, d - 1)
        put(name, substr(s, lastc, 1) == "." ? "PASSED" : "FAILED")
    }
}

# minitest-reporters: a "SuiteName" line, then "  test_name    PASS (0.01s)"; "Suite::test_name";
# a worse status (FAILED < ERROR) replaces a better one, never the reverse.
function p_ruby_v1(   i, s, suite, t, st, id, rank) {
    build_splitlines()
    rank["PASSED"] = 0; rank["SKIPPED"] = 0; rank["FAILED"] = 1; rank["ERROR"] = 2
    suite = ""
    for (i = 1; i <= NSL; i++) {
        s = rstrip(SLN[i])
        if (s == "" || starts(s, "Finished in ")) continue
        if (!starts(s, " ") && s ~ /^[A-Z][A-Za-z0-9_]*$/) { suite = s; continue }
        match(s, "^" SP "*")
        t = substr(s, RLENGTH + 1)
        if (!starts(t, "test")) continue
        if (!lazy_name(t, SP "+(PASS|PASSED|FAIL|FAILURE|ERROR|SKIP|SKIPPED)(" SP "*[(][0-9.]+s[)])?$", 5)) continue
        if (NAME ~ /[A-Z\n]/) continue
        st = SUFFIX
        sub("^" SP "+", "", st)
        sub(/[^A-Z].*$/, "", st)
        st = st ~ /^PASS/ ? "PASSED" : st ~ /^FAIL/ ? "FAILED" : st ~ /^SKIP/ ? "SKIPPED" : "ERROR"
        id = suite != "" ? suite "::" NAME : NAME
        if (!(id in ST) || rank[st] > rank[ST[id]]) put(id, st)
    }
}

# minitest verbose: "FooTest#test_bar = 0.01 s = ." with . F E S.
function p_ruby_v2(   i, s, c) {
    build_splitlines()
    for (i = 1; i <= NSL; i++) {
        s = strip(SLN[i])
        if (!lazy_name(s, SP "+=" SP "+[0-9.]+" SP "+s" SP "+=" SP "+[.FES]$", 3)) continue
        if (!match(NAME, /^.+#./)) continue
        c = substr(s, length(s), 1)
        put(NAME, c == "." ? "PASSED" : c == "S" ? "SKIPPED" : "FAILED")
    }
}

# test-unit: "[test: ]name: ." with . pass, E/F fail, O omitted; the last such colon on the line.
function p_ruby_unit(   i, s, k, c, st, name, best) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        best = 0
        for (k = length(s) - 1; k >= 2; k--) {
            if (substr(s, k, 1) != ":" || !match(substr(s, k + 1), "^" SP "+")) continue
            c = substr(s, k + 1 + RLENGTH, 1)
            if (c == "." || ((c == "E" || c == "F" || c == "O") && !is_word(substr(s, k + 2 + RLENGTH, 1)))) {
                best = k
                st = c == "." ? "PASSED" : c == "O" ? "SKIPPED" : "FAILED"
                break
            }
        }
        if (!best) continue
        name = substr(s, 1, best - 1)
        if (starts(name, "test: ") && length(name) > 6) name = substr(name, 7)
        put(name, st)
    }
}

# Cucumber progress: "<scenario> ...." then "." pass or "F" fail.
function p_cucumber(   i, s, k, rest) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        for (k = length(s) - 1; k >= 1; k--) {
            if (substr(s, k, 1) != " ") continue
            rest = substr(s, k + 1)
            if (match(rest, /^[.]+F/)) { put(substr(s, 1, k - 1), "FAILED"); break }
            if (match(rest, /^[.][.]/)) { put(substr(s, 1, k - 1), "PASSED"); break }
        }
    }
}

# ---------------------------------------------------------------------------------------------------
# C, C++

# googletest: "[       OK ] Suite.Name (0 ms)", "[  FAILED  ] Suite.Name (1 ms)".
function p_googletest(   i, s, rest, k, m, n, pos, p) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        if (!ends(s, ")")) continue
        # The last "[ OK ]" / "[ FAILED ]" after which the line reads " name (...)".
        n = 0
        pos = 0
        rest = s
        while (match(rest, "[[]" SP "*(OK|FAILED)" SP "*[]]")) {
            BR_END[++n] = pos + RSTART + RLENGTH - 1
            BR_ST[n] = index(substr(rest, RSTART, RLENGTH), "OK") ? "PASSED" : "FAILED"
            pos += RSTART
            rest = substr(rest, RSTART + 1)
        }
        for (m = n; m >= 1; m--) {
            rest = substr(s, BR_END[m] + 1)
            if (!match(rest, "^" SP)) continue
            p = 0
            for (k = length(rest) - 1; k >= 2; k--) if (substr(rest, k + 1, 1) == "(" && substr(rest, k, 1) ~ ("^" SP "$")) { p = k; break }
            if (!p) continue
            put(substr(rest, 2, p - 2), BR_ST[m])
            break
        }
    }
}

# "Test <name>   passed|failed|skipped"; a pass never replaces another status.
function p_cpp_v2(   i, s, st, name) {
    build_splitlines()
    for (i = 1; i <= NSL; i++) {
        s = strip(SLN[i])
        if (!lazy_name(s, SP "+(passed|failed|skipped)$", 5) || !lead(NAME, "Test" SP)) continue
        name = NAME
        sub("^Test" SP "+", "", name)
        st = SUFFIX
        sub("^" SP "+", "", st)
        if (st == "passed") put_new(name, "PASSED")
        else put(name, st == "failed" ? "FAILED" : "SKIPPED")
    }
}

# CTest: "1/3 Test #1: name ........   Passed    0.01 sec" (case-insensitive; "***Failed" is not matched).
function p_ctest(   i, s, low, st, off, at, re) {
    build_splitlines()
    re = SP "+[.]+" SP "+(passed|failed|skipped|timeout)"
    for (i = 1; i <= NSL; i++) {
        s = SLN[i]
        if (strip(s) == "") continue
        low = tolower(s)
        if (!lead(low, SP "*[0-9]+/[0-9]+" SP "+test" SP "+#[0-9]+:" SP "+")) continue
        s = substr(s, length(HEAD) + 1)
        low = TAIL
        # The first "  ....  Status" after a non-empty name that ends at a word boundary.
        off = 1
        at = 0
        while (match(substr(low, off + 1), re)) {
            if (!is_word(substr(low, off + RSTART + RLENGTH, 1))) { at = off + RSTART; break }
            off += RSTART
        }
        if (!at) continue
        st = substr(low, at, RLENGTH)
        sub(/^[^a-z]*/, "", st)
        put(substr(s, 1, at - 1), st == "passed" ? "PASSED" : st == "skipped" ? "SKIPPED" : "FAILED")
    }
}

# Automake `make check`: "PASS: name" and "FAIL: name" as upstream reads them; XFAIL, XPASS, SKIP and
# ERROR lines are recorded too (never as passes), so they count as tests found.
function p_automake(   i, s, st) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        if (!lead(s, "(PASS|FAIL|XFAIL|XPASS|SKIP|ERROR):" SP) || TAIL == "") continue
        st = substr(HEAD, 1, index(HEAD, ":") - 1)
        if (st == "PASS") put(TAIL, "PASSED")
        else if (st == "FAIL") put(TAIL, "FAILED")
        else if (!(TAIL in ST)) put(TAIL, st == "ERROR" ? "ERROR" : st == "XPASS" ? "FAILED" : "SKIPPED")
    }
}

# ---------------------------------------------------------------------------------------------------
# Other runners

# Redis' Tcl suite: "[ok]: name (12 ms)", "[err]: name in tests/x.tcl", "[skip]: name".
function p_redis(   i, s, st, name) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        if (!lead(s, "[[](ok|err|skip|ignore)[]]:" SP) || TAIL == "") continue
        st = substr(HEAD, 2, index(HEAD, "]") - 2)
        name = TAIL
        if (lazy_name(name, SP "[(][0-9]+" SP "*m?s[)]$", 1)) name = NAME
        if (st == "ok") put(name, "PASSED")
        else if (st == "err") {
            sub(SP "+in" SP "+[^ \t\n\r\013\014\034-\037]+$", "", name)
            put(name, "FAILED")
        } else put(name, "SKIPPED")
    }
}

function p_micropython(   i, s, st) {
    for (i = 1; i <= NL; i++) {
        s = strip(L[i])
        if (!lead(s, "(pass|FAIL|skip)" SP "+") || TAIL == "") continue
        st = starts(HEAD, "pass") ? "PASSED" : starts(HEAD, "FAIL") ? "FAILED" : "SKIPPED"
        put(TAIL, st)
    }
}

# ExUnit --trace: "* test name (1.2ms) [L#12]", "* test name (skipped) [L#3]", "1) test name (Module)".
function p_elixir(   i, s, name) {
    build_splitlines()
    for (i = 1; i <= NSL; i++) {
        s = strip(SLN[i])
        if (s == "") continue
        if (lead(s, "[*]" SP "+test" SP "+")) {
            name = TAIL
            if (lazy_name(name, SP "+[(]skipped[)]" SP "+[[]L#[0-9]+[]]$", 1)) { put(NAME, "SKIPPED"); continue }
        }
        if (lead(s, "[0-9]+[)]" SP "+test" SP "+") && lazy_name(TAIL, SP "+[(][^)]+[)]$", 1)) {
            put(NAME, "FAILED")
            continue
        }
        if (lead(s, "[*]" SP "+test" SP "+")) {
            name = TAIL
            if (lazy_name(name, SP "+[(][0-9]+([.][0-9]+)?ms[)]" SP "+[[]L#[0-9]+[]]$", 1)) { put_new(NAME, "PASSED"); continue }
            if (lazy_name(name, SP "+[[]L#[0-9]+[]]$", 1)) put_new(NAME, "PASSED")
        }
    }
}

# plenary.nvim busted: "Success || name", "Fail || name", "Skip || name"; counters ("Success: 3") skipped.
function p_nvim(   i, s, first, name) {
    build_splitlines()
    for (i = 1; i <= NSL; i++) {
        s = SLN[i]
        if (strip(s) == "") continue
        gsub(/\033\[[0-9;]*m/, "", s)
        s = rstrip(s)
        first = s
        sub(/\t.*/, "", first)
        if (index(first, ":") && !index(s, "||")) continue
        if (lead(s, "(Fail|Failed)" SP "*[|][|]" SP "*") && (name = strip(TAIL)) != "") { put(name, "FAILED"); continue }
        if (lead(tolower(s), "(skip|skipped)" SP "*[|][|]" SP "*")) {
            name = strip(substr(s, length(HEAD) + 1))
            if (name != "") { put_new(name, "SKIPPED"); continue }
        }
        if (lead(s, "Success" SP "*[|][|]" SP "*") && (name = strip(TAIL)) != "") put_new(name, "PASSED")
    }
}

# XCTest: "Test Case 'Suite.testName' passed (0.01 seconds)".
function p_swift(   i, s, name) {
    build_splitlines()
    for (i = 1; i <= NSL; i++) {
        s = strip(SLN[i])
        if (!match(s, "^Test Case '[^']+'" SP "+(passed|failed)" SP "+[(][0-9.]+" SP "+seconds[)]$")) continue
        name = substr(s, 12)
        name = substr(name, 1, index(name, "'") - 1)
        put(name, match(s, "'" SP "+passed") ? "PASSED" : "FAILED")
    }
}

# dotnet test / xUnit: "  Passed Name [12 ms]", "  Failed Name [1 s]", "  Skipped Name",
# "[xUnit.net 00:00:01.23]     Name [FAIL]".
function p_csharp(   i, s, t) {
    build_splitlines()
    for (i = 1; i <= NSL; i++) {
        s = rstrip(SLN[i])
        if (s == "") continue
        if (lead(s, "[[]xUnit[.]net" SP "+[0-9:.]+[]]" SP "+") && lazy_name(TAIL, SP "+[[]FAIL[]]$", 1)) { put(NAME, "FAILED"); continue }
        if (lead(s, SP "+Failed" SP "+") && lazy_name(TAIL, SP "+[[].+[]]$", 1)) { put(NAME, "FAILED"); continue }
        if (lead(s, SP "+Skipped" SP "+") && TAIL != "") {
            t = TAIL
            if (lazy_name(t, SP "+[[].+[]]$", 1)) t = NAME
            put(t, "SKIPPED")
            continue
        }
        if (lead(s, SP "+Passed" SP "+") && lazy_name(TAIL, SP "+[[].+[]]$", 1)) put_new(NAME, "PASSED")
    }
}

# ScalaTest: "[info] - name (12 milliseconds)", "... *** FAILED *** (...)", "!!! CANCELED !!!", "!!! IGNORED !!!".
function p_scala(   i, s, t) {
    build_splitlines()
    for (i = 1; i <= NSL; i++) {
        s = strip(SLN[i])
        if (!lead(s, "[[]info[]]" SP "+-" SP "+")) continue
        t = TAIL
        if (lazy_name(t, SP "+[*][*][*]" SP "+FAILED" SP "+[*][*][*]" SP "+[(][^)]+[)]$", 1)) put(NAME, "FAILED")
        else if (lazy_name(t, SP "+!!!" SP "+CANCELED" SP "+!!!" SP "+[(][^)]+[)]$", 1)) put(NAME, "SKIPPED")
        else if (match(t, SP "+!!!" SP "+IGNORED" SP "+!!!") && RSTART > 1) put(substr(t, 1, RSTART - 1), "SKIPPED")
        else if (lazy_name(t, SP "+[(][^)]+[)]$", 1)) put_new(NAME, "PASSED")
    }
}

# Alcotest: "[OK]  suite  0   description." -> "suite 0 description."; failures override passes.
function p_ocaml(   i, s, tok, st, rest, gap, suite, idx, name) {
    build_splitlines()
    for (i = 1; i <= NSL; i++) {
        s = rstrip(SLN[i])
        if (!lead(s, SP "*[[][A-Z]+[]]")) continue
        tok = HEAD
        gsub("[][]|" SP, "", tok)
        if (!lead(TAIL, SP "+")) continue
        gap = length(HEAD)
        rest = TAIL
        # The suite is the shortest text followed by "  <index>  <name>"; it may be empty when the
        # blank after the status is wider than one character.
        if (lazy_name(rest, SP "+[0-9]+" SP "+.", 1)) {
            suite = NAME
            rest = SUFFIX
            sub("^" SP "+", "", rest)
        } else if (gap >= 2 && rest ~ ("^[0-9]+" SP "+.")) suite = ""
        else continue
        match(rest, /^[0-9]+/)
        idx = substr(rest, 1, RLENGTH)
        name = strip(substr(rest, RLENGTH + 1))
        st = (tok == "OK" || tok == "PASS") ? "PASSED" : (tok == "FAIL" || tok == "FAILED") ? "FAILED" \
            : (tok == "SKIP" || tok == "SKIPPED" || tok == "TODO") ? "SKIPPED" : "ERROR"
        s = (strip(suite) != "" ? strip(suite) " " : "") idx " " name
        if (st == "PASSED") put_new(s, st)
        else put(s, st)
    }
}
