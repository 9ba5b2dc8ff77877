/*
** Plugin objects: each open loads the plugin, resolves its options, gives it a lamp_ctx for
** its error messages and calls its create. Every wrapper clears that message before calling
** into the plugin and turns a failure into lamp_error("<plugin>: <message>").
*/
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "base/error.h"
#include "base/log.h"
#include "plugin/bootstrap.h"
#include "plugin/instance.h"
#include "plugin/optim_pieces.h"
#include "tensor/dtype.h"

/* ---- what every plugin object shares --------------------------------------------------------- */

typedef struct instance {
  const lamp_plugin_handle *handle;
  lamp_ctx *ctx;
  double *params; /* resolved, hdr.n_params values */
  char **texts;   /* resolved text options (ABI 1.4), the core's copies, n_texts of them */
  uint32_t n_texts;
  void *state;    /* the plugin's object */
  lamp_bootstrap *boot; /* a communicator's, when it was created with one */
} instance;

struct lamp_precision {
  instance in;
  const lamp_precision_v1 *t;
};

struct lamp_comm {
  instance in;
  const lamp_comm_v1 *t;
};

struct lamp_optim {
  instance in;
  const lamp_optim_v1 *t;
  lamp_optim_slot slots[LAMP_OPTIM_MAX_SLOTS]; /* as declared at open */
  uint32_t n_slots;
  lamp_optim_piece_room pieces; /* the segments of a step cut for the host's threads */
};

/* A member the plugin provides: NULL when it is NULL or lies past the plugin's struct_size. */
#define OPTIONAL(table, type, m)                                                                   \
  (offsetof(type, m) + sizeof((table)->m) <= (table)->hdr.struct_size ? (table)->m : NULL)

static const char *name_of(const instance *in) { return in->handle->desc->name; }

static int status_known(lamp_status st) {
  return (int)st >= LAMP_OK && (int)st <= LAMP_ERR_NUMERIC;
}

/* A plugin call returned st: "<plugin>: <its message>". A plugin passes on a failure of the
   bootstrap without a message of its own (comm.h): the bootstrap's is the message then. */
static lamp_status finish(const instance *in, const char *what, lamp_status st) {
  if (st == LAMP_OK) return LAMP_OK;
  const char *msg = lamp_ctx_message(in->ctx);
  if (msg[0] == '\0' && in->boot != NULL) msg = lamp_bootstrap_failure(in->boot);
  if (!status_known(st))
    return lamp_error(LAMP_ERR_INTERNAL, "%s: %s returned unknown status %d%s%s", name_of(in), what,
                      (int)st, msg[0] ? ": " : "", msg);
  if (msg[0] != '\0') return lamp_error(st, "%s: %s", name_of(in), msg);
  return lamp_error(st, "%s: %s failed (%s) without a message", name_of(in), what,
                    lamp_status_name(st));
}

/* Forgets the messages of earlier calls. */
static void clear(instance *in) {
  lamp_ctx_clear(in->ctx);
  if (in->boot != NULL) lamp_bootstrap_clear_failure(in->boot);
}

#define PLUGIN_CALL(in, what, call) (clear(in), finish((in), (what), (call)))

static lamp_status unsupported(const instance *in, const char *what) {
  return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: %s is not supported by this %s plugin", name_of(in),
                    what, lamp_kind_name(in->handle->kind));
}

static lamp_status find_plugin(lamp_kind kind, const char *name, const lamp_plugin_handle **out) {
  if (name == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "NULL %s plugin name", lamp_kind_name(kind));
  if (kind == LAMP_KIND_COMM && strcmp(name, "auto") == 0)
    return lamp_plugin_select_auto(kind, out);
  return lamp_plugin_load(kind, name, out);
}

/* The resolved texts point into the declarations or the caller's strings: the object keeps its
   own copies, which the plugin may read for as long as it lives. */
static lamp_status keep_texts(instance *in, const char **resolved) {
  for (uint32_t i = 0; i < in->n_texts; i++) {
    in->texts[i] = strdup(resolved[i]);
    if (in->texts[i] == NULL)
      return lamp_error(LAMP_ERR_SYSTEM, "%s: out of memory for its options", name_of(in));
  }
  return LAMP_OK;
}

static lamp_status resolve_params(instance *in, const lamp_options *given) {
  const lamp_plugin *desc = in->handle->desc;
  (void)lamp_plugin_text_params(desc, &in->n_texts);
  in->params = calloc(desc->n_params > 0 ? desc->n_params : 1, sizeof *in->params);
  in->texts = calloc(in->n_texts > 0 ? in->n_texts : 1, sizeof *in->texts);
  const char **resolved = calloc(in->n_texts > 0 ? in->n_texts : 1, sizeof *resolved);
  lamp_status st = LAMP_OK;
  if (in->params == NULL || in->texts == NULL || resolved == NULL)
    st = lamp_error(LAMP_ERR_SYSTEM, "%s: out of memory for its options", desc->name);
  if (st == LAMP_OK) st = lamp_options_resolve(desc, given, in->params, resolved);
  if (st == LAMP_OK) st = keep_texts(in, resolved);
  free(resolved);
  return st;
}

typedef lamp_status (*create_fn)(const lamp_host *host, lamp_ctx *ctx, const double *params,
                                 void **state);

/* Every family table has create right after its header, each under its own type. */
static create_fn create_of(const lamp_plugin_handle *h) {
  switch (h->kind) {
  case LAMP_KIND_PRECISION: return ((const lamp_precision_v1 *)h->desc)->create;
  case LAMP_KIND_COMM: return ((const lamp_comm_v1 *)h->desc)->create;
  case LAMP_KIND_OPTIM: return ((const lamp_optim_v1 *)h->desc)->create;
  }
  return NULL;
}

static void instance_end(instance *in) {
  lamp_ctx_free(in->ctx);
  free(in->params);
  for (uint32_t i = 0; in->texts != NULL && i < in->n_texts; i++) free(in->texts[i]);
  free(in->texts);
  lamp_bootstrap_close(in->boot);
  in->boot = NULL;
}

typedef lamp_status (*create_boot_fn)(const lamp_host *host, lamp_ctx *ctx, const double *params,
                                      const lamp_bootstrap *boot, void **comm);

/* The seconds the bootstrap's opening exchange may take: the communicator's own "timeout"
   option where it declares one and it is not at its default (which cannot be told from no
   option, as in the mpi plugin), else LAMP_COMM_TIMEOUT, else 300. */
static double boot_timeout(const instance *in) {
  const lamp_plugin *d = in->handle->desc;
  for (uint32_t i = 0; i < d->n_params; i++)
    if (strcmp(d->params[i].name, "timeout") == 0 && in->params[i] != d->params[i].default_value)
      return in->params[i];
  return lamp_bootstrap_default_timeout();
}

/* A communicator with create_with_bootstrap (ABI 1.3) gets the run's bootstrap, built here;
   every other plugin its create. */
static lamp_status create_object(instance *in) {
  create_boot_fn with_boot = NULL;
  if (in->handle->kind == LAMP_KIND_COMM)
    with_boot = OPTIONAL((const lamp_comm_v1 *)in->handle->desc, lamp_comm_v1, create_with_bootstrap);
  if (with_boot == NULL)
    return PLUGIN_CALL(in, "create", create_of(in->handle)(lamp_host_get(), in->ctx, in->params, &in->state));
  lamp_status st = lamp_bootstrap_open(&in->boot, boot_timeout(in));
  if (st != LAMP_OK) return lamp_error_context(st, "%s", name_of(in));
  st = PLUGIN_CALL(in, "create", with_boot(lamp_host_get(), in->ctx, in->params, in->boot, &in->state));
  /* Closing the bootstrap next may wait for the other ranks (MPI_Finalize) until they fail too
     or the launcher ends the job: say why now, or the reason could die with the process. */
  if (st != LAMP_OK && lamp_bootstrap_close_waits(in->boot))
    lamp_log(LAMP_LOG_ERROR, name_of(in), "create failed, closing the bootstrap over %s (this waits for the other ranks): %s",
             lamp_bootstrap_transport(in->boot), lamp_last_error());
  return st;
}

/* Load, options, context, create; on failure nothing is left allocated. */
static lamp_status instance_open(instance *in, lamp_kind kind, const char *name, const lamp_options *given) {
  memset(in, 0, sizeof *in);
  lamp_status st = find_plugin(kind, name, &in->handle);
  if (st == LAMP_OK) st = resolve_params(in, given);
  if (st == LAMP_OK && (in->ctx = lamp_ctx_new()) == NULL) st = LAMP_ERR_SYSTEM;
  if (st == LAMP_OK) lamp_ctx_bind_texts(in->ctx, in->handle->desc, in->texts);
  if (st == LAMP_OK) st = create_object(in);
  if (st != LAMP_OK) instance_end(in);
  return st;
}

static lamp_status null_output(lamp_kind kind) {
  return lamp_error(LAMP_ERR_INVALID_ARG, "opening a %s plugin: NULL output", lamp_kind_name(kind));
}

/* Allocates a wrapper whose first member is its instance, and opens it. */
static lamp_status wrapper_open(void **out, size_t size, lamp_kind kind, const char *name, const lamp_options *given) {
  *out = NULL;
  instance *w = calloc(1, size);
  if (w == NULL)
    return lamp_error(LAMP_ERR_SYSTEM, "out of memory opening a %s plugin", lamp_kind_name(kind));
  lamp_status st = instance_open(w, kind, name, given);
  if (st != LAMP_OK) {
    free(w);
    return st;
  }
  *out = w;
  return LAMP_OK;
}

/* ---- devices: where a plugin runs, and the host view ----------------------------------------- */

/* What the plugin declares. ABI 1.0 did not enforce the field and plugins built against it
   may leave it 0; they ran on the CPU. */
static uint32_t declared_devices(const lamp_plugin *d) {
  if (d->devices == 0 && d->abi_minor == 0) return LAMP_BIT(LAMP_CPU);
  return d->devices;
}

/* Only the ABI's devices can be declared: plugins never see the core's own. */
static int declares(const lamp_plugin_handle *h, lamp_device device) {
  return (unsigned)device < LAMP_DEVICE_COUNT &&
         (declared_devices(h->desc) & LAMP_BIT(device)) != 0;
}

/* A device it does not declare, whose memory a plugin declaring the CPU can reach as host
   memory. */
static int through_host_view(const lamp_plugin_handle *h, lamp_device device) {
  return device != LAMP_CPU && !declares(h, device) && declares(h, LAMP_CPU) &&
         lamp_device_has(device, LAMP_CAP_HOST_VIEW);
}

int lamp_plugin_runs_on(const lamp_plugin_handle *h, lamp_device device) {
  return h != NULL && (declares(h, device) || through_host_view(h, device));
}

/* "cpu, cuda", or "none". */
static void device_list(uint32_t mask, char *out, size_t size) {
  size_t used = 0;
  out[0] = '\0';
  for (int d = 0; d < LAMP_DEVICE_COUNT && used < size; d++)
    if (mask & LAMP_BIT(d))
      used += (size_t)snprintf(out + used, size - used, "%s%s", used ? ", " : "",
                               lamp_device_name((lamp_device)d));
  if (out[0] == '\0') snprintf(out, size, "none");
}

lamp_status lamp_plugin_check_device(const lamp_plugin_handle *h, lamp_device device) {
  if (h == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "plugin device check: NULL plugin");
  if (lamp_plugin_runs_on(h, device)) return LAMP_OK;
  char list[64];
  device_list(declared_devices(h->desc), list, sizeof list);
  return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: does not run on %s (its devices: %s)", h->desc->name,
                    lamp_device_name(device), list);
}

/* How a wrapper hands one call's buffers to the plugin. */
typedef struct placement {
  lamp_device device; /* what the plugin is told */
  lamp_device memory; /* where the buffers live */
  int viewed;         /* the plugin gets their host view */
} placement;

/* Refuses a device the plugin cannot run on. Through the host view it first waits for the
   device's queued work: the device does not order host accesses. */
static lamp_status place(const instance *in, lamp_device device, placement *p) {
  p->device = p->memory = device;
  p->viewed = 0;
  if (declares(in->handle, device)) return LAMP_OK;
  if (!through_host_view(in->handle, device)) return lamp_plugin_check_device(in->handle, device);
  lamp_status st = lamp_synchronize(device);
  if (st != LAMP_OK) return st;
  p->device = LAMP_CPU;
  p->viewed = 1;
  return LAMP_OK;
}

/* The address the plugin gets for ptr: ptr itself, or its host view. */
static lamp_status place_buffer(const instance *in, const placement *p, const char *what,
                                const void *ptr, void **out) {
  *out = (void *)(uintptr_t)ptr;
  if (!p->viewed || ptr == NULL) return LAMP_OK;
  *out = lamp_device_host_view(p->memory, ptr);
  if (*out != NULL) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_ARG, "%s: %s (%p) is not memory of device %s", name_of(in),
                    what, ptr, lamp_device_name(p->memory));
}

/* ---- precision ------------------------------------------------------------------------------- */

lamp_status lamp_precision_open(lamp_precision **out, const char *name_or_path,
                                const lamp_option *opts, size_t n_opts) {
  const lamp_options given = {opts, n_opts, NULL, 0};
  return lamp_precision_open_options(out, name_or_path, &given);
}

lamp_status lamp_precision_open_options(lamp_precision **out, const char *name_or_path, const lamp_options *given) {
  if (out == NULL) return null_output(LAMP_KIND_PRECISION);
  *out = NULL;
  void *w = NULL;
  lamp_status st = wrapper_open(&w, sizeof(lamp_precision), LAMP_KIND_PRECISION, name_or_path, given);
  if (st != LAMP_OK) return st;
  lamp_precision *p = w;
  p->t = (const lamp_precision_v1 *)p->in.handle->desc;
  *out = p;
  return LAMP_OK;
}

void lamp_precision_close(lamp_precision *p) {
  if (p == NULL) return;
  p->t->destroy(p->in.state);
  instance_end(&p->in);
  free(p);
}

const lamp_plugin_handle *lamp_precision_handle(const lamp_precision *p) {
  return p != NULL ? p->in.handle : NULL;
}

static lamp_status check_policy(const lamp_precision *p, const lamp_precision_policy *pol) {
  const struct {
    const char *name;
    uint32_t dtype;
  } fields[] = {{"weight_dtype", pol->weight_dtype},
                {"compute_dtype", pol->compute_dtype},
                {"activation_dtype", pol->activation_dtype},
                {"grad_dtype", pol->grad_dtype},
                {"accum_dtype", pol->accum_dtype}};
  for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
    if (!lamp_dtype_is_float((lamp_dtype)fields[i].dtype))
      return lamp_error(LAMP_ERR_INTERNAL, "%s: policy %s %u is not a floating-point dtype",
                        name_of(&p->in), fields[i].name, (unsigned)fields[i].dtype);
  return LAMP_OK;
}

lamp_status lamp_precision_policy_get(lamp_precision *p, lamp_precision_policy *out) {
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  lamp_status st = PLUGIN_CALL(&p->in, "policy", p->t->policy(p->in.state, out));
  out->struct_size = sizeof *out;
  return st == LAMP_OK ? check_policy(p, out) : st;
}

double lamp_precision_loss_scale(lamp_precision *p) { return p->t->loss_scale(p->in.state); }

lamp_status lamp_precision_update(lamp_precision *p, int found_inf, int *skip_step) {
  *skip_step = 0;
  return PLUGIN_CALL(&p->in, "update", p->t->update(p->in.state, found_inf, skip_step));
}

lamp_status lamp_precision_stats(lamp_precision *p, lamp_scaler_stats *out) {
  memset(out, 0, sizeof *out);
  out->struct_size = sizeof *out;
  lamp_status st = PLUGIN_CALL(&p->in, "stats", p->t->stats(p->in.state, out));
  out->struct_size = sizeof *out;
  return st;
}

/* The plugin must report at most the bytes it was given: reading past the buffer would copy
   the core's own memory into the checkpoint. */
lamp_status lamp_precision_save_state(lamp_precision *p, void *buf, size_t *size) {
  lamp_status (*save)(void *, void *, size_t *) = OPTIONAL(p->t, lamp_precision_v1, save_state);
  if (save == NULL) {
    *size = 0;
    return LAMP_OK;
  }
  size_t given = *size;
  lamp_status st = PLUGIN_CALL(&p->in, "save_state", save(p->in.state, buf, size));
  if (st == LAMP_OK && buf != NULL && *size > given)
    return lamp_error(LAMP_ERR_INTERNAL,
                      "%s: save_state reported %zu bytes, more than the %zu-byte buffer it was given",
                      name_of(&p->in), *size, given);
  return st;
}

static lamp_status no_state(const lamp_precision *p, size_t size) {
  if (size == 0) return LAMP_OK;
  return lamp_error(LAMP_ERR_INVALID_USAGE,
                    "%s: has no scaler state, the checkpoint holds %zu bytes", name_of(&p->in),
                    size);
}

lamp_status lamp_precision_load_state(lamp_precision *p, const void *buf, size_t size) {
  lamp_status (*load)(void *, const void *, size_t) = OPTIONAL(p->t, lamp_precision_v1, load_state);
  if (load != NULL) return PLUGIN_CALL(&p->in, "load_state", load(p->in.state, buf, size));
  return no_state(p, size);
}

/*
** The ABI has no "check": the state is loaded into a scratch object of the same plugin, made
** with the same options, and thrown away, so the live one is never touched by a refusal.
*/
lamp_status lamp_precision_check_state(lamp_precision *p, const void *buf, size_t size) {
  lamp_status (*load)(void *, const void *, size_t) = OPTIONAL(p->t, lamp_precision_v1, load_state);
  if (load == NULL) return no_state(p, size);
  void *scratch = NULL;
  lamp_status st = PLUGIN_CALL(&p->in, "create",
                               p->t->create(lamp_host_get(), p->in.ctx, p->in.params, &scratch));
  if (st != LAMP_OK) return st;
  st = PLUGIN_CALL(&p->in, "load_state", load(scratch, buf, size));
  p->t->destroy(scratch);
  return st;
}

/* ---- comm ------------------------------------------------------------------------------------ */

lamp_status lamp_comm_open(lamp_comm **out, const char *name_or_path, const lamp_option *opts,
                           size_t n_opts) {
  const lamp_options given = {opts, n_opts, NULL, 0};
  return lamp_comm_open_options(out, name_or_path, &given);
}

lamp_status lamp_comm_open_options(lamp_comm **out, const char *name_or_path, const lamp_options *given) {
  if (out == NULL) return null_output(LAMP_KIND_COMM);
  *out = NULL;
  void *w = NULL;
  lamp_status st = wrapper_open(&w, sizeof(lamp_comm), LAMP_KIND_COMM, name_or_path, given);
  if (st != LAMP_OK) return st;
  lamp_comm *c = w;
  c->t = (const lamp_comm_v1 *)c->in.handle->desc;
  *out = c;
  return LAMP_OK;
}

void lamp_comm_close(lamp_comm *c) {
  if (c == NULL) return;
  c->t->destroy(c->in.state);
  instance_end(&c->in);
  free(c);
}

const lamp_plugin_handle *lamp_comm_handle(const lamp_comm *c) {
  return c != NULL ? c->in.handle : NULL;
}

int lamp_comm_rank(lamp_comm *c) { return c->t->rank(c->in.state); }

int lamp_comm_size(lamp_comm *c) { return c->t->size(c->in.state); }

lamp_status lamp_comm_all_reduce(lamp_comm *c, void *buf, size_t count, lamp_dtype dtype,
                                 lamp_reduce_op op, lamp_device device) {
  placement p;
  lamp_status st = place(&c->in, device, &p);
  if (st == LAMP_OK) st = place_buffer(&c->in, &p, "all_reduce buffer", buf, &buf);
  if (st != LAMP_OK) return st;
  return PLUGIN_CALL(&c->in, "all_reduce",
                     c->t->all_reduce(c->in.state, buf, count, dtype, op, p.device));
}

lamp_status lamp_comm_broadcast(lamp_comm *c, void *buf, size_t count, lamp_dtype dtype, int root,
                                lamp_device device) {
  placement p;
  lamp_status st = place(&c->in, device, &p);
  if (st == LAMP_OK) st = place_buffer(&c->in, &p, "broadcast buffer", buf, &buf);
  if (st != LAMP_OK) return st;
  return PLUGIN_CALL(&c->in, "broadcast",
                     c->t->broadcast(c->in.state, buf, count, dtype, root, p.device));
}

lamp_status lamp_comm_barrier(lamp_comm *c) {
  return PLUGIN_CALL(&c->in, "barrier", c->t->barrier(c->in.state));
}

int lamp_comm_supports(const lamp_comm *c, const char *op) {
  if (c == NULL || op == NULL) return 0;
  if (strcmp(op, "all_reduce_start") == 0)
    return OPTIONAL(c->t, lamp_comm_v1, all_reduce_start) != NULL &&
           OPTIONAL(c->t, lamp_comm_v1, wait) != NULL;
  if (strcmp(op, "all_gather") == 0) return OPTIONAL(c->t, lamp_comm_v1, all_gather) != NULL;
  if (strcmp(op, "reduce_scatter") == 0)
    return OPTIONAL(c->t, lamp_comm_v1, reduce_scatter) != NULL;
  if (strcmp(op, "all_reduce_enqueue") == 0)
    return OPTIONAL(c->t, lamp_comm_v1, all_reduce_enqueue) != NULL &&
           OPTIONAL(c->t, lamp_comm_v1, wait_stream) != NULL && OPTIONAL(c->t, lamp_comm_v1, poll) != NULL;
  return 0;
}

lamp_status lamp_comm_all_reduce_start(lamp_comm *c, void *buf, size_t count, lamp_dtype dtype,
                                       lamp_reduce_op op, lamp_device device, lamp_request **req) {
  if (!lamp_comm_supports(c, "all_reduce_start")) return unsupported(&c->in, "all_reduce_start");
  placement p;
  lamp_status st = place(&c->in, device, &p);
  if (st == LAMP_OK) st = place_buffer(&c->in, &p, "all_reduce_start buffer", buf, &buf);
  if (st != LAMP_OK) return st;
  return PLUGIN_CALL(&c->in, "all_reduce_start",
                     c->t->all_reduce_start(c->in.state, buf, count, dtype, op, p.device, req));
}

lamp_status lamp_comm_wait(lamp_comm *c, lamp_request *req) {
  if (!lamp_comm_supports(c, "all_reduce_start")) return unsupported(&c->in, "wait");
  return PLUGIN_CALL(&c->in, "wait", c->t->wait(c->in.state, req));
}

/*
** Where a stream-ordered call's buffer is for the plugin: as it is on a device the plugin declares;
** on a device whose memory a CPU plugin reaches through the host view (the simulated device), the
** view, told LAMP_CPU, and without a synchronisation, because the plugin's work is queued on the
** device's stream behind the work that wrote the buffer. Anything else is refused: a host view
** would need the host to wait for the device, which these calls exist to avoid.
*/
static lamp_status stream_buffer(const lamp_comm *c, const char *what, lamp_device device, void **buf,
                                 lamp_device *told) {
  *told = device;
  if (declares(c->in.handle, device)) return LAMP_OK;
  void *view = declares(c->in.handle, LAMP_CPU) && *buf != NULL ? lamp_device_host_view(device, *buf) : NULL;
  if (view != NULL) {
    *buf = view;
    *told = LAMP_CPU;
    return LAMP_OK;
  }
  char list[64];
  device_list(declared_devices(c->in.handle->desc), list, sizeof list);
  return lamp_error(LAMP_ERR_UNSUPPORTED, "%s: %s on %s needs a plugin that declares %s (its devices: %s)",
                    name_of(&c->in), what, lamp_device_name(device), lamp_device_name(device), list);
}

lamp_status lamp_comm_all_reduce_enqueue(lamp_comm *c, void *buf, size_t count, lamp_dtype dtype,
                                         lamp_reduce_op op, lamp_device device, void *stream,
                                         lamp_request **req) {
  if (!lamp_comm_supports(c, "all_reduce_enqueue")) return unsupported(&c->in, "all_reduce_enqueue");
  lamp_device told;
  lamp_status st = stream_buffer(c, "all_reduce_enqueue", device, &buf, &told);
  if (st != LAMP_OK) return st;
  return PLUGIN_CALL(&c->in, "all_reduce_enqueue",
                     c->t->all_reduce_enqueue(c->in.state, buf, count, dtype, op, told, stream, req));
}

lamp_status lamp_comm_wait_stream(lamp_comm *c, lamp_request *req, void *stream) {
  if (!lamp_comm_supports(c, "all_reduce_enqueue")) return unsupported(&c->in, "wait_stream");
  return PLUGIN_CALL(&c->in, "wait_stream", c->t->wait_stream(c->in.state, req, stream));
}

lamp_status lamp_comm_poll(lamp_comm *c) {
  if (!lamp_comm_supports(c, "all_reduce_enqueue")) return unsupported(&c->in, "poll");
  return PLUGIN_CALL(&c->in, "poll", c->t->poll(c->in.state));
}

lamp_status lamp_comm_all_gather(lamp_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                                 lamp_dtype dtype, lamp_device device) {
  if (!lamp_comm_supports(c, "all_gather")) return unsupported(&c->in, "all_gather");
  placement p;
  void *send = NULL, *recv = NULL;
  lamp_status st = place(&c->in, device, &p);
  if (st == LAMP_OK) st = place_buffer(&c->in, &p, "all_gather sendbuf", sendbuf, &send);
  if (st == LAMP_OK) st = place_buffer(&c->in, &p, "all_gather recvbuf", recvbuf, &recv);
  if (st != LAMP_OK) return st;
  return PLUGIN_CALL(&c->in, "all_gather",
                     c->t->all_gather(c->in.state, send, recv, count, dtype, p.device));
}

lamp_status lamp_comm_reduce_scatter(lamp_comm *c, const void *sendbuf, void *recvbuf, size_t count,
                                     lamp_dtype dtype, lamp_reduce_op op, lamp_device device) {
  if (!lamp_comm_supports(c, "reduce_scatter")) return unsupported(&c->in, "reduce_scatter");
  placement p;
  void *send = NULL, *recv = NULL;
  lamp_status st = place(&c->in, device, &p);
  if (st == LAMP_OK) st = place_buffer(&c->in, &p, "reduce_scatter sendbuf", sendbuf, &send);
  if (st == LAMP_OK) st = place_buffer(&c->in, &p, "reduce_scatter recvbuf", recvbuf, &recv);
  if (st != LAMP_OK) return st;
  return PLUGIN_CALL(&c->in, "reduce_scatter",
                     c->t->reduce_scatter(c->in.state, send, recv, count, dtype, op, p.device));
}

/* ---- optim ----------------------------------------------------------------------------------- */

/* The slots the core can allocate: at most LAMP_OPTIM_MAX_SLOTS, every one f32. Kept, for
   handing them to the plugin through the host view. */
static lamp_status check_slots(lamp_optim *o) {
  lamp_optim_slot *decls = o->slots;
  uint32_t n = 0;
  lamp_status st = lamp_optim_slots(o, decls, LAMP_OPTIM_MAX_SLOTS, &n);
  if (st != LAMP_OK) return st;
  if (n > LAMP_OPTIM_MAX_SLOTS)
    return lamp_error(LAMP_ERR_UNSUPPORTED,
                      "%s: declares %u state slots, this core allows at most %d", name_of(&o->in),
                      (unsigned)n, LAMP_OPTIM_MAX_SLOTS);
  for (uint32_t i = 0; i < n; i++)
    if (decls[i].dtype != LAMP_F32)
      return lamp_error(LAMP_ERR_UNSUPPORTED,
                        "%s: state slot '%s' has dtype %s; this core allocates f32 slots only",
                        name_of(&o->in), decls[i].name,
                        lamp_dtype_name((lamp_dtype)decls[i].dtype));
  o->n_slots = n;
  return LAMP_OK;
}

lamp_status lamp_optim_open(lamp_optim **out, const char *name_or_path, const lamp_option *opts,
                            size_t n_opts) {
  const lamp_options given = {opts, n_opts, NULL, 0};
  return lamp_optim_open_options(out, name_or_path, &given);
}

lamp_status lamp_optim_open_options(lamp_optim **out, const char *name_or_path, const lamp_options *given) {
  if (out == NULL) return null_output(LAMP_KIND_OPTIM);
  *out = NULL;
  void *w = NULL;
  lamp_status st = wrapper_open(&w, sizeof(lamp_optim), LAMP_KIND_OPTIM, name_or_path, given);
  if (st != LAMP_OK) return st;
  lamp_optim *o = w;
  o->t = (const lamp_optim_v1 *)o->in.handle->desc;
  st = check_slots(o);
  if (st != LAMP_OK) {
    lamp_optim_close(o); /* the message is recorded already; closing leaves it alone */
    return st;
  }
  *out = o;
  return LAMP_OK;
}

void lamp_optim_close(lamp_optim *o) {
  if (o == NULL) return;
  o->t->destroy(o->in.state);
  instance_end(&o->in);
  free(o->pieces.segments);
  free(o);
}

const lamp_plugin_handle *lamp_optim_handle(const lamp_optim *o) {
  return o != NULL ? o->in.handle : NULL;
}

int lamp_optim_hparam(const lamp_optim *o, const char *name, double *value) {
  const lamp_plugin *desc = o->in.handle->desc;
  for (uint32_t i = 0; name != NULL && i < desc->n_params; i++) {
    if (strcmp(desc->params[i].name, name) == 0) {
      *value = o->in.params[i];
      return 0;
    }
  }
  return -1;
}

const char *lamp_optim_text(const lamp_optim *o, const char *name) {
  uint32_t n;
  const lamp_text_param *t = lamp_plugin_text_params(o->in.handle->desc, &n);
  for (uint32_t i = 0; name != NULL && i < n; i++)
    if (strcmp(t[i].name, name) == 0) return o->in.texts[i];
  return NULL;
}

lamp_status lamp_optim_slots(lamp_optim *o, lamp_optim_slot *out, uint32_t max, uint32_t *n) {
  *n = 0;
  lamp_status st = PLUGIN_CALL(&o->in, "slots", o->t->slots(o->in.state, out, max, n));
  for (uint32_t i = 0; st == LAMP_OK && i < *n && i < max; i++)
    if (out[i].name == NULL || out[i].dtype >= LAMP_DTYPE_COUNT)
      st = lamp_error(LAMP_ERR_INTERNAL, "%s: state slot %u has %s", name_of(&o->in), (unsigned)i,
                      out[i].name == NULL ? "no name" : "an unknown dtype");
  return st;
}

uint32_t lamp_optim_caps(const lamp_optim *o) {
  const lamp_optim_v1 *t = o->t;
  return offsetof(lamp_optim_v1, caps) + sizeof t->caps <= t->hdr.struct_size ? t->caps : 0u;
}

static lamp_status check_segments(const lamp_optim *o, const lamp_optim_step *s) {
  size_t next = 0;
  if (s->n_segments > 0 && s->segments == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: step has %zu segments but no segment array",
                      name_of(&o->in), s->n_segments);
  for (size_t i = 0; i < s->n_segments; i++) {
    if (s->segments[i].offset != next)
      return lamp_error(LAMP_ERR_INVALID_ARG, "%s: step segment %zu starts at %zu, expected %zu",
                        name_of(&o->in), i, s->segments[i].offset, next);
    if (s->segments[i].count > s->n - next)
      return lamp_error(LAMP_ERR_INVALID_ARG, "%s: step segment %zu ends past the %zu elements",
                        name_of(&o->in), i, s->n);
    next += s->segments[i].count;
  }
  if (next != s->n)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: step segments cover %zu of %zu elements",
                      name_of(&o->in), next, s->n);
  return LAMP_OK;
}

/* ABI 1.4: what the plugin is promised of the tensor table (optim.h), checked like the segments. */
static lamp_status check_tensor(const lamp_optim *o, const lamp_optim_step *s, size_t i, size_t next) {
  const lamp_optim_tensor *t = &s->tensors[i];
  const char *name = t->name != NULL ? t->name : "?";
  if (t->name == NULL || (t->ndim > 0 && t->shape == NULL))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: step tensor %zu has no %s", name_of(&o->in), i,
                      t->name == NULL ? "name" : "shape");
  if (t->offset != next)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: step tensor %zu ('%s') starts at %zu, expected %zu", name_of(&o->in),
                      i, name, t->offset, next);
  uint64_t numel = 1;
  for (uint32_t d = 0; d < t->ndim; d++) numel *= t->shape[d] > 0 ? (uint64_t)t->shape[d] : 0;
  if (numel != t->count)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: step tensor %zu ('%s') has %zu elements, its shape %llu",
                      name_of(&o->in), i, name, t->count, (unsigned long long)numel);
  const lamp_optim_segment *seg = t->segment < s->n_segments ? &s->segments[t->segment] : NULL;
  if (seg == NULL || t->offset < seg->offset || t->count > seg->offset + seg->count - t->offset)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: step tensor %zu ('%s') lies outside its segment %zu", name_of(&o->in),
                      i, name, t->segment);
  return LAMP_OK;
}

static lamp_status check_tensors(const lamp_optim *o, const lamp_optim_step *s) {
  if (s->n_tensors > 0 && s->tensors == NULL)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: step has %zu tensors but no tensor table", name_of(&o->in),
                      s->n_tensors);
  size_t next = 0;
  for (size_t i = 0; i < s->n_tensors; i++) {
    lamp_status st = check_tensor(o, s, i, next);
    if (st != LAMP_OK) return st;
    next += s->tensors[i].count;
  }
  if (s->n_tensors > 0 && next != s->n)
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: step tensors cover %zu of %zu elements", name_of(&o->in), next, s->n);
  return LAMP_OK;
}

/* The step as the plugin sees it through the host view: a copy with its own slot array, so
   the caller's step keeps its device pointers. */
static lamp_status view_step(const lamp_optim *o, const placement *p, const lamp_optim_step *step,
                             lamp_optim_step *out, float **slots) {
  *out = *step;
  out->device = p->device;
  out->stream = NULL;
  out->slots = step->slots != NULL ? slots : NULL;
  void *v = NULL;
  lamp_status st = place_buffer(&o->in, p, "step params", step->params, &v);
  out->params = v;
  if (st == LAMP_OK) st = place_buffer(&o->in, p, "step grads", step->grads, &v);
  out->grads = v;
  if (st == LAMP_OK) st = place_buffer(&o->in, p, "step weights_out", step->weights_out, &v);
  out->weights_out = v;
  if (st == LAMP_OK && step->slots == NULL && o->n_slots > 0)
    st = lamp_error(LAMP_ERR_INVALID_ARG, "%s: step without its %u state slots", name_of(&o->in),
                    (unsigned)o->n_slots);
  for (uint32_t i = 0; st == LAMP_OK && i < o->n_slots; i++) {
    char what[96];
    snprintf(what, sizeof what, "state slot '%s'", o->slots[i].name);
    st = place_buffer(&o->in, p, what, step->slots[i], &v);
    slots[i] = v;
  }
  return st;
}

lamp_status lamp_optim_apply(lamp_optim *o, lamp_optim_step *step) {
  if (step == NULL) return lamp_error(LAMP_ERR_INVALID_ARG, "%s: NULL step", name_of(&o->in));
  if (step->n > 0 && (step->params == NULL || step->grads == NULL))
    return lamp_error(LAMP_ERR_INVALID_ARG, "%s: step over %zu elements without params or grads",
                      name_of(&o->in), step->n);
  lamp_status st = check_segments(o, step);
  if (st == LAMP_OK) st = check_tensors(o, step);
  if (st == LAMP_OK && step->weights_out != NULL && !(lamp_optim_caps(o) & LAMP_OPTIM_CAP_WEIGHTS_OUT))
    st = lamp_error(LAMP_ERR_INTERNAL, "%s: step given weights_out, but the plugin does not write it (no LAMP_OPTIM_CAP_WEIGHTS_OUT)",
                    name_of(&o->in));
  if (st == LAMP_OK && step->weights_out != NULL && step->weights_out_dtype != LAMP_F16 &&
      step->weights_out_dtype != LAMP_BF16)
    st = lamp_error(LAMP_ERR_INTERNAL, "%s: step weights_out dtype must be f16 or bf16, got %u", name_of(&o->in),
                    (unsigned)step->weights_out_dtype);
  placement p;
  if (st == LAMP_OK) st = place(&o->in, (lamp_device)step->device, &p);
  if (st != LAMP_OK) return st;
  step->struct_size = sizeof *step;
  step->hparams = o->in.params;
  /* lamp_device_has(d, 0): d has a backend, so asking for its queue records no error. */
  step->stream = lamp_device_has(p.memory, 0) ? lamp_device_stream(p.memory) : NULL;
  if (!p.viewed) {
    size_t pieces = 1;
    if (p.device == LAMP_CPU && (lamp_optim_caps(o) & LAMP_OPTIM_CAP_PIECEWISE))
      pieces = lamp_optim_piece_count(step->n, lamp_host_threads());
    if (pieces == 1) return PLUGIN_CALL(&o->in, "step", o->t->step(o->in.state, step));
    if ((st = lamp_optim_piece_room_fit(&o->pieces, pieces, step->n_segments)) != LAMP_OK) return st;
    return PLUGIN_CALL(&o->in, "step", lamp_optim_step_pieces(o->t->step, o->in.state, step, o->n_slots, pieces, &o->pieces));
  }
  lamp_optim_step viewed;
  float *slots[LAMP_OPTIM_MAX_SLOTS];
  st = view_step(o, &p, step, &viewed, slots);
  if (st != LAMP_OK) return st;
  return PLUGIN_CALL(&o->in, "step", o->t->step(o->in.state, &viewed));
}
