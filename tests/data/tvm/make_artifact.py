"""How tests/data/tvm/opencl_add_tvm0.27.so was made: a Relax model (x + a constant, 16 floats)
built by Apache TVM 0.27 for OpenCL with an LLVM host, and exported with TVM's own
export_library. It holds __tvm_ffi__library_bin with a relax.VMExecutable, the host code and an
OpenCL module. Run with TVM's Python (pip install apache-tvm==0.27.0.post1); modpack's tests only
read the file.
"""

import sys

import numpy as np
import tvm
from tvm import relax
from tvm.script import ir as I
from tvm.script import relax as R


@I.ir_module
class Model:
    @R.function
    def main(x: R.Tensor((16,), "float32")) -> R.Tensor((16,), "float32"):
        with R.dataflow():
            y = R.add(x, R.const(np.ones(16, dtype="float32")))
            R.output(y)
        return y


target = tvm.target.Target("opencl", host="llvm")
with target:
    scheduled = tvm.ir.transform.Sequential([relax.transform.LegalizeOps(),
                                             tvm.s_tir.transform.DefaultGPUSchedule()])(Model)
relax.build(scheduled, target).export_library(sys.argv[1])
