/*
** Plugin objects as the rest of the core sees them: opaque handles whose functions return a
** status and report plugin errors through lamp_last_error(), prefixed with the plugin name
** ("fp16: ..."). Options are validated against the plugin's declared parameters.
*/
#ifndef LAMP_PLUGIN_INSTANCE_H
#define LAMP_PLUGIN_INSTANCE_H

#include "plugin/loader.h"

/* A user-supplied option; booleans are 0/1. */
typedef struct lamp_option {
  const char *name;
  double value;
} lamp_option;

/* A user-supplied text option (ABI 1.4): a string, or one of an enum's choices. */
typedef struct lamp_text_option {
  const char *name;
  const char *value;
} lamp_text_option;

/* Every option a user gave, numbers and texts, either list possibly empty. */
typedef struct lamp_options {
  const lamp_option *numbers;
  size_t n_numbers;
  const lamp_text_option *texts;
  size_t n_texts;
} lamp_options;

/*
** Fills values[desc->n_params] and, when texts is not NULL, texts[n_text_params] (the declared
** defaults, or the given strings themselves: not copied) from defaults and options. given NULL:
** none. Numbers and texts share one namespace. Errors:
**   "sgd: unknown option 'mom'; valid options: lr, momentum, dampening, nesterov, weight_decay"
**     (every name, the numbers' then the texts')
**   "sgd: option 'lr' must be in [0, 1e+06], got -1"
**   "lion: option 'lr' must be a number in [0, 10], got the string \"fast\""
**   "lion: option 'sign' must be a string, one of: exact, smooth; got the number 3"
**     ("must be a string; got ..." for a text option without choices)
**   "lion: option 'sign' must be one of: exact, smooth; got 'rough'"
**   "sgd: option 'lr' given twice"
*/
lamp_status lamp_options_resolve(const lamp_plugin *desc, const lamp_options *given, double *values,
                                 const char **texts);

/* lamp_options_resolve with numbers only, the texts left at their defaults. */
lamp_status lamp_params_resolve(const lamp_plugin *desc, const lamp_option *opts, size_t n_opts,
                                double *values);

/* What a text option takes, for messages: "a string", or "a string, one of: exact, smooth". */
void lamp_text_param_expected(const lamp_text_param *p, char *out, size_t size);

/*
** Devices. A plugin runs on the devices its hdr.devices declares (a plugin built against ABI 1.0
** that declares none counts as declaring the CPU: 1.0 did not enforce the field). It also runs
** on a device other than the CPU whose memory has a host view (LAMP_CAP_HOST_VIEW) when it
** declares the CPU: the comm and optim wrappers below then synchronise the device, hand the
** plugin the host addresses of its buffers and LAMP_CPU as the device, so it sees host memory.
** A wrapper called on a device the plugin cannot run on refuses before calling it, with
** lamp_plugin_check_device's message.
*/
int lamp_plugin_runs_on(const lamp_plugin_handle *h, lamp_device device);

/* LAMP_OK, or LAMP_ERR_UNSUPPORTED: "sgd: does not run on cuda (its devices: cpu)" ("none" when
   it declares none). */
lamp_status lamp_plugin_check_device(const lamp_plugin_handle *h, lamp_device device);

typedef struct lamp_precision lamp_precision;
typedef struct lamp_comm lamp_comm;
typedef struct lamp_optim lamp_optim;

/* name_or_path as in lamp_plugin_load; for comm, "auto" selects by probe. */
lamp_status lamp_precision_open(lamp_precision **out, const char *name_or_path, const lamp_option *opts, size_t n_opts);
lamp_status lamp_comm_open(lamp_comm **out, const char *name_or_path, const lamp_option *opts, size_t n_opts);
lamp_status lamp_optim_open(lamp_optim **out, const char *name_or_path, const lamp_option *opts, size_t n_opts);
/* The same with text options too (given NULL: none). The object keeps its own copies of the
   texts: the plugin reads them with host->option_text for as long as it lives. */
lamp_status lamp_precision_open_options(lamp_precision **out, const char *name_or_path, const lamp_options *given);
lamp_status lamp_comm_open_options(lamp_comm **out, const char *name_or_path, const lamp_options *given);
lamp_status lamp_optim_open_options(lamp_optim **out, const char *name_or_path, const lamp_options *given);
void lamp_precision_close(lamp_precision *p); /* NULL is a no-op */
void lamp_comm_close(lamp_comm *c);
void lamp_optim_close(lamp_optim *o);

const lamp_plugin_handle *lamp_precision_handle(const lamp_precision *p);
const lamp_plugin_handle *lamp_comm_handle(const lamp_comm *c);
const lamp_plugin_handle *lamp_optim_handle(const lamp_optim *o);

/* Precision. */
lamp_status lamp_precision_policy_get(lamp_precision *p, lamp_precision_policy *out);
double lamp_precision_loss_scale(lamp_precision *p);
lamp_status lamp_precision_update(lamp_precision *p, int found_inf, int *skip_step);
lamp_status lamp_precision_stats(lamp_precision *p, lamp_scaler_stats *out);
/*
** Scaler state for checkpoints. With buf NULL, *size receives the bytes needed (0 for a
** stateless plugin, whose save_state is absent). Loading 0 bytes into a stateless plugin is
** fine; loading more is "fp32: has no scaler state, the checkpoint holds 24 bytes". A save_state
** that reports more bytes than its buffer holds is refused: "<plugin>: save_state reported 4096
** bytes, more than the 24-byte buffer it was given".
*/
lamp_status lamp_precision_save_state(lamp_precision *p, void *buf, size_t *size);
lamp_status lamp_precision_load_state(lamp_precision *p, const void *buf, size_t size);
/* Whether load_state would accept this state, without changing p: a resume checks it before it
   changes anything. The refusal is load_state's own message. */
lamp_status lamp_precision_check_state(lamp_precision *p, const void *buf, size_t size);

/* Comm. */
int lamp_comm_rank(lamp_comm *c);
int lamp_comm_size(lamp_comm *c);
lamp_status lamp_comm_all_reduce(lamp_comm *c, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op, lamp_device device);
lamp_status lamp_comm_broadcast(lamp_comm *c, void *buf, size_t count, lamp_dtype dtype, int root, lamp_device device);
lamp_status lamp_comm_barrier(lamp_comm *c);
/*
** Optional operations. lamp_comm_supports names one ("all_reduce_start", which implies wait;
** "all_gather"; "reduce_scatter"; "all_reduce_enqueue", which implies wait_stream and poll, ABI
** 1.3: the loader refuses a plugin with only some of the three); calling one the plugin lacks is
** LAMP_ERR_UNSUPPORTED, "single: all_gather is not supported by this comm plugin".
**
** The stream-ordered calls (comm.h) pass `stream` through: the device's queue the all-reduce
** follows (lamp_device_stream(device)) and the one wait_stream makes wait. all_reduce_enqueue
** hands a CPU plugin the host view of a device's buffer without waiting (the simulated device:
** the plugin's work is queued behind the work that wrote it) and refuses any other device the
** plugin does not declare ("x: all_reduce_enqueue on cuda needs a plugin that declares cuda (its
** devices: cpu)"), because a host view would have to wait for the device. poll
** never blocks; after a failed collective it fails every time with the plugin's message.
**
** A communicator with create_with_bootstrap (ABI 1.3) is created with the run's bootstrap
** (plugin/bootstrap.h), which lives until lamp_comm_close has destroyed it. When a call fails
** because the bootstrap did, the message is "<plugin>: bootstrap: ...".
*/
int lamp_comm_supports(const lamp_comm *c, const char *op);
lamp_status lamp_comm_all_reduce_start(lamp_comm *c, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op, lamp_device device, lamp_request **req);
lamp_status lamp_comm_wait(lamp_comm *c, lamp_request *req);
lamp_status lamp_comm_all_gather(lamp_comm *c, const void *sendbuf, void *recvbuf, size_t count, lamp_dtype dtype, lamp_device device);
lamp_status lamp_comm_all_reduce_enqueue(lamp_comm *c, void *buf, size_t count, lamp_dtype dtype, lamp_reduce_op op, lamp_device device, void *stream, lamp_request **req);
lamp_status lamp_comm_wait_stream(lamp_comm *c, lamp_request *req, void *stream);
lamp_status lamp_comm_poll(lamp_comm *c);
lamp_status lamp_comm_reduce_scatter(lamp_comm *c, const void *sendbuf, void *recvbuf, size_t count, lamp_dtype dtype, lamp_reduce_op op, lamp_device device);

/* Optim. hparam lookup by name (for "lr"): returns 0 and sets *value when declared, -1 when
   the plugin declares no such parameter. */
int lamp_optim_hparam(const lamp_optim *o, const char *name, double *value);
/* A text option's value (ABI 1.4), NULL when the plugin declares no such text option. */
const char *lamp_optim_text(const lamp_optim *o, const char *name);
lamp_status lamp_optim_slots(lamp_optim *o, lamp_optim_slot *out, uint32_t max, uint32_t *n);
/* The plugin's LAMP_OPTIM_CAP_* bits (0 for a plugin built before ABI 1.2). */
uint32_t lamp_optim_caps(const lamp_optim *o);
/* Fills step->hparams, step->stream (the device's queue) and struct_size itself, and checks that
   the segments cover [0, n) in order and that params and grads are given ("sgd: step segment 1
   starts at 50, expected 40"), and that the tensor table, when given, covers [0, n) in order,
   each tensor inside its segment ("sgd: step tensor 1 ('0.bias') starts at 50, expected 40").
   step->device says where every pointer lives (see Devices).
   step->weights_out (16-bit, f16 or bf16) is refused for a plugin without
   LAMP_OPTIM_CAP_WEIGHTS_OUT. A LAMP_OPTIM_CAP_PIECEWISE plugin's step over cpu memory is cut
   into one piece per host thread where each has at least LAMP_OPTIM_PIECE_MIN elements
   (optim_pieces.h): the same bits, sooner. */
lamp_status lamp_optim_apply(lamp_optim *o, lamp_optim_step *step);

#endif
