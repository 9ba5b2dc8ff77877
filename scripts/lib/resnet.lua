-- The small ResNet (scripts/bench/torch_twin.py --arch cnn trains the same in PyTorch), shared by the
-- ResNet scripts (require "resnet" after adding scripts/lib to package.path), as two stages:
--   stage 1: conv3x3(c_in -> 16) -> BN -> ReLU -> block(16) -> maxpool 2
--   stage 2: conv3x3(16 -> 32) -> BN -> ReLU -> block(32) -> global average pool -> flatten
--            -> linear(32 -> classes)
-- where block(c) = relu(x + bn(conv(relu(bn(conv(x)))))), every convolution 3x3, padding 1, no bias.
-- With `recompute`, each stage is wrapped in nn.Recompute (its activations are recomputed in
-- backward instead of kept; the second stage's head is small enough to ride along). nn.Recompute
-- adds no name level, so the parameters have the same names ("0.0.weight", ...) either way.
local M = {}

local function conv3x3(nn, c_in, c_out)
  return nn.Conv2d(c_in, c_out, 3, { padding = 1, bias = false })
end

-- The residual block: the sum, then the ReLU after it, as torch's Block.forward.
function M.block(nn, c)
  return nn.Sequential {
    nn.Residual(nn.Sequential { conv3x3(nn, c, c), nn.BatchNorm2d(c), nn.ReLU(), conv3x3(nn, c, c), nn.BatchNorm2d(c) }),
    nn.ReLU(),
  }
end

-- widths: the two stage widths ({16, 32} by default); recompute: wrap each stage in nn.Recompute.
function M.build(nn, in_channels, classes, widths, recompute)
  local w1, w2 = widths and widths[1] or 16, widths and widths[2] or 32
  local stage = recompute and nn.Recompute or function(m) return m end
  return nn.Sequential {
    stage(nn.Sequential { conv3x3(nn, in_channels, w1), nn.BatchNorm2d(w1), nn.ReLU(), M.block(nn, w1), nn.MaxPool2d(2) }),
    stage(nn.Sequential { conv3x3(nn, w1, w2), nn.BatchNorm2d(w2), nn.ReLU(), M.block(nn, w2),
                          nn.GlobalAvgPool(), nn.Flatten(), nn.Linear(w2, classes) }),
  }
end

return M
