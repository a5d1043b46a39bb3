/*
 * Internals of the Jinja interpreter shared by its files: the arena, values, tokens, the syntax
 * tree and the render state.
 *
 * DESIGN: values are small structs passed by value (jv: a kind and a payload); strings, lists
 * and dicts they point to live in an arena and are never freed one by one. Strings are UTF-8,
 * always valid (checked where they enter), NUL-terminated for convenience, and measured in
 * bytes; Python's code-point semantics (len, indexing, slicing) are computed on the fly
 * (codepoints.c). Python behaviour that depends on the kind of container (a tuple prints as
 * "(1,)", a generator is always true and has no len, a dict view cannot be indexed) is the
 * list's `sub`.
 *
 * Files: lex.c (source -> tokens, whitespace control), parse.c (tokens -> tree, the compile
 * entry), parse_expr.c (expressions), parse_util.c (the parser's helpers), value.c
 * (errors, arena, containers, equality, str() and repr()), json.c (tojson), number.c (float
 * repr and parsing), eval.c (expressions), exec.c (statements, scopes, render entry),
 * filters.c (filters and tests), methods.c (str/dict methods, globals, the loop object),
 * codepoints.c (UTF-8 and code points), ustr.c (Python whitespace and case mapping), vars.c
 * (the public value builders).
 */
#ifndef ES_JINJA_INT_H
#define ES_JINJA_INT_H

#include "jinja/jinja.h"

#include <stdbool.h>
#include <stdarg.h>

/* ---- arena -------------------------------------------------------------------------------- */
typedef struct ja_chunk ja_chunk;
typedef struct ja_arena {
    ja_chunk *head;
    size_t total; /* bytes of all chunks */
    size_t cap;   /* most bytes of chunks (0: no limit) */
    bool capped;  /* an allocation failed because of cap (not malloc) */
} ja_arena;
/* n bytes, 16-aligned, not zeroed; NULL when out of memory or past cap (then capped is set). */
void *ja_alloc(ja_arena *a, size_t n);
void *ja_zalloc(ja_arena *a, size_t n);
void ja_free_all(ja_arena *a);

/* ---- values ------------------------------------------------------------------------------- */
enum {
    JV_UNDEF = 0, /* jinja2's Undefined: prints "", false, iterates empty, most uses raise */
    JV_NONE,
    JV_BOOL,
    JV_INT,
    JV_FLOAT,
    JV_STR,
    JV_LIST, /* sub: JL_* */
    JV_DICT,
    JV_NS,      /* namespace(): a dict whose keys are attributes; the only assignable object */
    JV_FUNC,    /* a global or a bound method */
    JV_LOOP,    /* the loop variable of a for */
    JV_MACRO,   /* a {% macro %}: its definition and the scope it was defined in */
    JV_MISSING, /* internal: an argument not given */
};
enum { JL_LIST = 0, JL_TUPLE, JL_GEN, JL_VIEW, JL_RANGE };

typedef struct jstr {
    size_t len;
    char b[]; /* len bytes + NUL */
} jstr;
typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jnode jnode;
typedef struct jscope jscope;
typedef struct jfunc jfunc;
typedef struct jloop jloop;
typedef struct jmacro jmacro;
typedef struct jundef {
    const char *name;  /* the variable, attribute or key that was missing (NULL: see hint) */
    const char *hint;  /* a full message instead (NULL: built from name and owner) */
    const char *owner; /* the type of the object name was looked up in, as jinja2 names it in
                        * its message ("dict", "jinja2.utils.Namespace", "None"); NULL: a
                        * plain variable */
} jundef;

typedef struct jv {
    uint8_t k;   /* JV_* */
    uint8_t sub; /* JV_LIST: JL_* */
    union {
        int64_t i; /* JV_INT, JV_BOOL */
        double f;
        const jstr *s;
        jlist *l;
        jdict *d; /* JV_DICT, JV_NS */
        const jfunc *fn;
        jloop *lp;
        const jmacro *mac;
        const jundef *u;
    };
} jv;

struct jlist {
    size_t n, cap;
    jv *v;
    bool used; /* JL_GEN: iterated once already (a Python generator is then spent) */
};
struct jdict {
    size_t n, cap;
    jv *k, *v;
};
struct jmacro {
    const jnode *def; /* N_MACRO */
    jscope *scope;    /* where it was defined: its body sees those names (when called) */
};
/* The functions and methods a template can call (methods.c implements them). */
/* clang-format off */
enum {
    JM_RANGE = 1, JM_NAMESPACE, JM_DICT, JM_RAISE, JM_STRFTIME,
    JM_STARTSWITH, JM_ENDSWITH, JM_STRIP, JM_LSTRIP, JM_RSTRIP, JM_SPLIT, JM_RSPLIT, JM_REPLACE,
    JM_UPPER, JM_LOWER, JM_TITLE, JM_CAPITALIZE, JM_FIND, JM_RFIND, JM_COUNT, JM_JOIN,
    JM_REMOVEPREFIX, JM_REMOVESUFFIX, JM_ISDIGIT, JM_ISSPACE, JM_ISLOWER, JM_ISUPPER,
    JM_GET, JM_ITEMS, JM_KEYS, JM_VALUES, JM_CYCLE, JM_CHANGED,
};
/* clang-format on */
struct jfunc {
    int id;  /* JM_* */
    jv self; /* the bound object (JV_MISSING for a global) */
};
/* The loop variable, with jinja2's LoopContext semantics: the for's `if` filters the items
 * lazily, one at a time as the loop reaches them, so a filter that reads state the body changes
 * sees the change; loop.last and loop.nextitem filter one item ahead, loop.length all of them. */
struct jloop {
    int64_t index0;   /* the current iteration */
    int64_t length;   /* -1 until known */
    jv prev, cur;     /* previtem (JV_MISSING before the second iteration), the current item */
    const jlist *src; /* the items before filtering */
    size_t pos;       /* the next item of src to filter */
    jlist *ahead;     /* items that passed the filter, not yet iterated (queue from head) */
    size_t head;
    const jnode *target, *cond; /* the for's target and `if` (NULL: no filter) */
    jscope *
        scope; /* where the filter is evaluated: the target bound, parent the loop's surroundings */
    jlist *changed; /* loop.changed's last arguments (NULL: never called) */
};

static inline jv jv_undef(void)
{
    jv r = {0};
    return r;
}
static inline jv jv_none(void)
{
    jv r = {.k = JV_NONE};
    return r;
}
static inline jv jv_bool(bool b)
{
    jv r = {.k = JV_BOOL, .i = b};
    return r;
}
static inline jv jv_int(int64_t i)
{
    jv r = {.k = JV_INT, .i = i};
    return r;
}
static inline jv jv_float(double f)
{
    jv r = {.k = JV_FLOAT, .f = f};
    return r;
}
static inline jv jv_str(const jstr *s)
{
    jv r = {.k = JV_STR, .s = s};
    return r;
}
static inline jv jv_list(jlist *l, int sub)
{
    jv r = {.k = JV_LIST, .sub = (uint8_t)sub, .l = l};
    return r;
}
static inline jv jv_missing(void)
{
    jv r = {.k = JV_MISSING};
    return r;
}
static inline bool jv_is_num(jv x)
{
    return x.k == JV_INT || x.k == JV_FLOAT || x.k == JV_BOOL;
}

/* ---- syntax tree -------------------------------------------------------------------------- */
/* clang-format off */
enum {
    /* expressions */
    N_CONST, N_NAME, N_GETATTR, N_GETITEM, N_SLICE, N_CALL, N_FILTER, N_TEST, N_NOT, N_NEG,
    N_POS, N_BINOP, N_AND, N_OR, N_COMPARE, N_CONCAT, N_COND, N_LIST, N_TUPLE, N_DICT, N_NSREF,
    /* statements */
    N_BODY, N_DATA, N_OUTPUT, N_IF, N_FOR, N_SET, N_SETBLOCK, N_BREAK, N_CONTINUE, N_MACRO,
};
/* clang-format on */
/* N_BINOP ops and N_COMPARE operators */
enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW };
enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE, CMP_IN, CMP_NOTIN };

struct jnode {
    uint8_t k;      /* N_* */
    uint8_t op;     /* OP_* / CMP_* (N_COMPARE: per operand in ops) */
    uint16_t depth; /* height of the expression tree below (bounds eval recursion) */
    int line;
    jnode *a, *b, *c;   /* children: operands, object/index, test/body/else, slice parts */
    jnode **v;          /* list children: items, args, statements, compare operands, if tests */
    jnode **w;          /* second list: dict values, kwarg values, if bodies */
    const char **names; /* kwarg names [nw] */
    uint8_t *ops;       /* N_COMPARE: operator of each operand */
    int nv, nw;
    const char *name; /* N_NAME, N_GETATTR, N_NSREF (the namespace), filter/test names */
    const char *attr; /* N_NSREF: the attribute */
    int fid;          /* N_FILTER / N_TEST: the filter or test; N_COND: the line the
                       * conditional expression starts on (jinja2's message names it) */
    jv cv;            /* N_CONST, N_DATA (a string) */
};

struct es_jinja_tmpl {
    ja_arena arena;
    jnode *root; /* N_BODY */
    char name[48];
};

/* The variables of a render (vars.c); a value handle is a boxed jv in the same arena. */
struct es_jinja_vars {
    ja_arena arena;
    size_t n, cap;
    const char **names;
    jv *vals;
};
struct es_jinja_val {
    jv v;
};

/* ---- tokens ------------------------------------------------------------------------------- */
/* clang-format off */
enum {
    T_EOF, T_DATA, T_BLOCK_BEGIN, T_BLOCK_END, T_VAR_BEGIN, T_VAR_END, T_NAME, T_STRING, T_INT,
    T_FLOAT,
    /* operators */
    T_ADD, T_SUB, T_DIV, T_FLOORDIV, T_MUL, T_MOD, T_POW, T_TILDE, T_LBRACKET, T_RBRACKET,
    T_LPAREN, T_RPAREN, T_LBRACE, T_RBRACE, T_EQ, T_NE, T_GT, T_GTEQ, T_LT, T_LTEQ, T_ASSIGN,
    T_DOT, T_COLON, T_PIPE, T_COMMA, T_SEMICOLON,
};
/* clang-format on */
typedef struct jtok {
    uint8_t t;
    int line;
    const char *p; /* T_NAME, T_DATA: the text (not NUL-terminated) */
    size_t n;
    const jstr *s; /* T_STRING: the decoded literal */
    int64_t i;
    double f;
} jtok;

/* Errors of compiling and rendering (value.c): "<name> line <line>: <message>" into
 * es_last_error(). */
es_status ja_fail(const char *name, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
es_status ja_vfail(const char *name, int line, const char *fmt, va_list ap);

/* lex.c: the source (already checked to be valid UTF-8) into toks[0..*n) (arena-allocated),
 * whitespace control applied, T_EOF last. */
es_status ja_lex(ja_arena *a, const char *name, const char *src, size_t len, jtok **toks,
                 size_t *n);
const char *ja_tok_desc(int t); /* "end of statement block", "'('" */

/* parse.c */
enum { JA_MAX_DEPTH = 128 }; /* nesting of expressions and statements */
es_status ja_parse(ja_arena *a, const char *name, const jtok *toks, size_t n, jnode **root);

/* ---- render state ------------------------------------------------------------------------- */
struct jscope {
    jscope *parent;
    size_t n, cap;
    const char **names;
    jv *vals;
};

typedef struct jbuf {
    char *p;
    size_t n, cap;
} jbuf;

typedef struct jr {
    const es_jinja_tmpl *t;
    const es_jinja_vars *vars;
    es_jinja_limits lim;
    ja_arena a;    /* every value made during the render */
    jbuf *out;     /* where output goes now (a {% set %} block redirects it) */
    jscope *scope; /* innermost scope; the root scope's parent is NULL */
    int64_t iters, work;
    int depth; /* recursion of evaluation, statements and macro calls */
    int flow;  /* FLOW_*: a {% break %} or {% continue %} unwinding */
    int line;  /* the line being evaluated, for errors raised deep inside helpers */
} jr;
enum { FLOW_NONE, FLOW_BREAK, FLOW_CONTINUE };
/* Most nested evaluations, statements and macro calls together: what bounds the C stack once
 * macros can call macros (each level is a few small C frames). */
enum { JA_MAX_RECURSION = 1500 };

/* Fails the render: "<template> line <R->line>: ..." (value.c). */
es_status jr_fail(jr *R, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Out of arena memory: ES_E_FORMAT "memory limit" when the cap was hit, else ES_E_NOMEM. */
es_status jr_oom(jr *R);
/* Charges n work units; ES_E_FORMAT once past the limit. */
static inline es_status jr_charge(jr *R, int64_t n)
{
    R->work += n;
    return R->work > R->lim.max_work ? jr_fail(R, "the template takes too long (work limit)")
                                     : ES_OK;
}

/* ---- value.c ------------------------------------------------------------------------------ */
jstr *ja_str_new(ja_arena *a, const char *p, size_t n);    /* copies; NULL: out of memory */
es_status jr_str(jr *R, const char *p, size_t n, jv *out); /* a string value, size-checked */
es_status jr_list_new(jr *R, size_t cap, jlist **out);
es_status jr_list_push(jr *R, jlist *l, jv x);
es_status jr_dict_new(jr *R, jdict **out);
es_status jr_dict_set(jr *R, jdict *d, jv key, jv val);
bool ja_list_push(ja_arena *a, jlist *l, jv x);                   /* false: out of memory */
bool ja_dict_set(ja_arena *a, jdict *d, jv key, jv val);          /* false: out of memory */
const jv *ja_dict_get(const jdict *d, const char *key, size_t n); /* NULL: absent */
const jv *ja_dict_find(const jdict *d, jv key);
/* Whether key can be a dict key: str, numbers, None and tuples of them; TypeError for what
 * Python cannot hash (lists, dicts), ES_E_FORMAT for hashable objects not supported as keys. */
es_status jr_key_check(jr *R, jv key);
/* Undefined: the variable name (owner JV_UNDEF: "'name' is undefined"), or the attribute or
 * string key name of owner ("'dict object' has no attribute 'name'"). */
jv jr_undef(jr *R, const char *name, jv owner);
/* Undefined: the item key of owner, with jinja2's message ("list object has no element 3"). */
jv jr_undef_item(jr *R, jv owner, jv key);
jv jr_undef_hint(jr *R, const char *hint);
const char *ja_undef_msg(jv u, char *buf, size_t cap); /* the message raising u gives */
const char *ja_type_name(jv x); /* Python's type name: "str", "int", "NoneType", ... */
bool ja_truthy(jv x);
es_status jr_eq(jr *R, jv a, jv b,
                bool *out); /* Python ==; errors only on what it cannot compare */
es_status jr_lt(jr *R, jv a, jv b, bool *out); /* Python <; TypeError for unorderable kinds */
es_status jr_len(jr *R, jv x, int64_t *out);   /* len(); TypeError where Python has none */
es_status jr_iter(jr *R, jv x, jlist **out);   /* the items iteration yields (dict: keys) */
es_status jr_contains(jr *R, jv container, jv item, bool *out); /* Python `in` */
/* str(x) appended to b: what {{ x }} prints. ES_E_FORMAT for values whose Python str cannot be
 * reproduced (an object's address, non-ASCII text inside a printed container). */
es_status jr_tostr(jr *R, jv x, jbuf *b);
es_status jr_tostr_val(jr *R, jv x, jv *out); /* the same as a string value (strings as-is) */
es_status jr_undef_fail(jr *R, jv u);         /* raises the UndefinedError of u */
es_status jr_buf_put(jr *R, jbuf *b, const char *p, size_t n); /* size-checked append */
void ja_buf_free(jbuf *b);

/* ---- number.c ----------------------------------------------------------------------------- */
/* Python's repr(float) ("1.0", "1e+16", "inf", "nan") into buf (>= 32 bytes); returns it. */
const char *ja_float_repr(double f, char *buf);
double ja_strtod(const char *s, char **end); /* strtod in the C locale */

/* ---- json.c ------------------------------------------------------------------------------- */
typedef struct ja_json_opts {
    bool ensure_ascii, sort_keys;
    const char *indent; /* NULL: none */
    size_t indent_len;
    const char *item_sep, *key_sep; /* NULL: json.dumps' defaults for the indent */
    size_t item_sep_len, key_sep_len;
} ja_json_opts;
/* json.dumps(x, ...) appended to b, as Python's json module writes it. */
es_status jr_tojson(jr *R, jv x, const ja_json_opts *o, jbuf *b);

/* ---- eval.c ------------------------------------------------------------------------------- */
es_status jr_eval(jr *R, const jnode *e, jv *out);
es_status jr_getattr(jr *R, jv obj, const char *name, jv *out); /* obj.name */
es_status jr_getitem(jr *R, jv obj, jv key, jv *out);           /* obj[key] */
es_status jr_binop(jr *R, int op, jv a, jv b, jv *out);
/* Calls f with evaluated arguments: argv[0..argc) then kwargs names[i] = kwv[i]. */
es_status jr_call(jr *R, jv f, const jv *argv, int argc, const char *const *kwn, const jv *kwv,
                  int kwc, jv *out);

/* ---- exec.c ------------------------------------------------------------------------------- */
es_status jr_exec_body(jr *R, const jnode *body);
/* Calls a macro with evaluated arguments, as jinja2's Macro.__call__ binds them; *out is the
 * text its body renders. */
es_status jr_call_macro(jr *R, const jmacro *m, const jv *argv, int argc, const char *const *kwn,
                        const jv *kwv, int kwc, jv *out);
/* The error of a filter or test the template names but this interpreter does not have. */
es_status jr_unknown(jr *R, const jnode *e);
/* The next item of a loop without consuming it (*got false at the end), and the loop's length;
 * both may run the for's filter on items ahead (exec.c). */
es_status jr_loop_peek(jr *R, jloop *lp, jv *item, bool *got);
es_status jr_loop_length(jr *R, jloop *lp, int64_t *n);
jv jr_lookup(jr *R, const char *name); /* scopes, then vars, then globals */

/* ---- filters.c ---------------------------------------------------------------------------- */
int ja_filter_id(const char *name);         /* -1: not implemented */
int ja_test_id(const char *name);           /* -1: not implemented */
bool ja_jinja_has_filter(const char *name); /* a jinja2 builtin (for the error message) */
bool ja_jinja_has_test(const char *name);
es_status jr_filter(jr *R, int id, jv x, const jv *argv, int argc, const char *const *kwn,
                    const jv *kwv, int kwc, jv *out);
es_status jr_test(jr *R, int id, jv x, const jv *argv, int argc, const char *const *kwn,
                  const jv *kwv, int kwc, bool *out);
/* Binds Python-style arguments to params[0..np) (the first nreq required): out[i] is the
 * argument or JV_MISSING. what names the callee in errors ("filter 'join'"). */
es_status jr_bind(jr *R, const char *what, const char *const *params, int np, int nreq,
                  const jv *argv, int argc, const char *const *kwn, const jv *kwv, int kwc,
                  jv *out);

/* ---- methods.c ---------------------------------------------------------------------------- */
/* The method name of obj bound to obj (a JV_FUNC), or undefined as Python's getattr would fail;
 * ES_E_FORMAT for a real Python method this interpreter does not implement. *found is false
 * when obj has no such attribute (a dict then falls back to its key). */
es_status jr_method(jr *R, jv obj, const char *name, jv *out, bool *found);
jv ja_global(const char *name); /* range, namespace, dict, raise_exception, strftime_now */
bool ja_jinja_has_global(const char *name); /* jinja2 globals we do not implement */
es_status jr_call_func(jr *R, const jfunc *f, const jv *argv, int argc, const char *const *kwn,
                       const jv *kwv, int kwc, jv *out);
es_status jr_loop_attr(jr *R, jv loop, const char *name, jv *out);
const char *ja_func_name(const jfunc *f);
const char *ja_func_type(const jfunc *f); /* Python's type name: "builtin_function_or_method"
                                           * (value.c, beside ja_type_name) */
/* Whether Python's object for f has a public attribute name (then obj.name is refused, not
 * undefined): a type (dict, namespace) has its methods; functions and methods have none. */
bool ja_func_has_attr(const jfunc *f, const char *name);
/* str.replace(old, new, count) (count < 0: all); an empty old inserts new around every code
 * point, as Python does. */
es_status jr_replace(jr *R, const jstr *s, const jstr *old, const jstr *new_, int64_t count,
                     jv *out);

/* ---- codepoints.c: UTF-8 and code points -------------------------------------------------- */
bool ja_utf8_valid(const char *s, size_t n);
uint32_t ja_utf8_next(const char *s, size_t n, size_t *i); /* decodes at *i (valid UTF-8) */
size_t ja_utf8_put(uint32_t cp, char *out);                /* 1..4 bytes */
size_t ja_cp_count(const char *s, size_t n);
size_t ja_cp_offset(const char *s, size_t n, size_t k); /* byte offset of code point k (<= n) */

/* ---- ustr.c: Python whitespace and case ------------------------------------------------------ */
bool ja_py_isspace(uint32_t cp);
/* Python's str.upper() / lower() / the titlecase of one code point into out (1 code point for
 * what is supported). Returns false for a code point whose case mapping is not implemented
 * (outside ASCII, Latin-1, Latin Extended-A, basic Cyrillic and known caseless blocks). */
bool ja_case_map(uint32_t cp, int upper, uint32_t *out);
bool ja_is_cased(uint32_t cp, int *is_upper, int *is_lower, bool *known);
es_status jr_case(jr *R, const jstr *s, int mode,
                  jv *out); /* mode: 'U' 'L' 'C' (capitalize) 'T' (str.title) 'J' (jinja title) */
es_status jr_strip(jr *R, const jstr *s, const jstr *chars, int ends,
                   jv *out); /* ends: 1 left 2 right 3 both */

#endif
