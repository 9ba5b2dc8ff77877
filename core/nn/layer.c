/* Reference counting shared by every layer type; the type's destroy frees the rest. */
#include "nn/layer.h"

lamp_layer *lamp_layer_retain(lamp_layer *layer) {
  if (layer != NULL) layer->refcount++;
  return layer;
}

void lamp_layer_release(lamp_layer *layer) {
  if (layer == NULL || --layer->refcount > 0) return;
  layer->ops->destroy(layer);
}
