-- The small ResNet (scripts/bench/torch_twin.py --arch cnn trains the same in PyTorch), shared by the
-- ResNet scripts (require "resnet" after adding scripts/lib to package.path):
--   conv3x3(c_in -> 16) -> BN -> ReLU -> block(16) -> maxpool 2 -> conv3x3(16 -> 32) -> BN -> ReLU
--   -> block(32) -> global average pool -> flatten -> linear(32 -> classes)
-- where block(c) = relu(x + bn(conv(relu(bn(conv(x)))))), every convolution 3x3, padding 1, no bias.
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

-- widths: the two stage widths ({16, 32} by default).
function M.build(nn, in_channels, classes, widths)
  local w1, w2 = widths and widths[1] or 16, widths and widths[2] or 32
  return nn.Sequential {
    conv3x3(nn, in_channels, w1), nn.BatchNorm2d(w1), nn.ReLU(), M.block(nn, w1),
    nn.MaxPool2d(2),
    conv3x3(nn, w1, w2), nn.BatchNorm2d(w2), nn.ReLU(), M.block(nn, w2),
    nn.GlobalAvgPool(), nn.Flatten(), nn.Linear(w2, classes),
  }
end

return M
