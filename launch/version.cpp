#include <google/protobuf/stubs/common.h>
#include <oneapi/tbb/version.h>
#include <onnx/common/version.h>

#include <cstdlib>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "launch/commands.h"
#include "ops/onednn/dnnl_util.h"

#ifdef TRAINRT_HAVE_MPI
#include <mpi.h>
#endif
#ifdef TRAINRT_HAVE_CUDA
#include "runtime/cuda/cuda_info.h"
#endif

namespace trainrt {

std::string version_report() {
  const dnnl_version_t* d = dnnl_version();
  std::string r = "trainrt " TRAINRT_VERSION "\n";
  r += "  onnx       " + std::string(ONNX_NAMESPACE::LAST_RELEASE_VERSION) + "\n";
  r += "  protobuf   " + google::protobuf::internal::VersionString(GOOGLE_PROTOBUF_VERSION) + "\n";
  r += "  oneDNN     " + std::to_string(d->major) + "." + std::to_string(d->minor) + "." + std::to_string(d->patch) +
       " (cpu runtime " +
       (d->cpu_runtime == DNNL_RUNTIME_OMP   ? "OpenMP"
        : d->cpu_runtime == DNNL_RUNTIME_TBB ? "TBB"
                                             : "other") +
       ")\n";
  // PASSIVE unless the user set another (launch/main/trainrt.cpp prefer_passive_openmp).
  const char* wait = std::getenv("OMP_WAIT_POLICY");
  r += std::string("  OpenMP     wait policy ") + (wait ? wait : "libgomp's default (spin, then sleep)") + "\n";
  r += "  oneTBB     " + std::string(TBB_VERSION_STRING) + "\n";
  // The CPU paths the cpu backend takes (CI logs print this line, so a green run says
  // which half of the AVX2 / AVX-512 kernels it checked).
  const char* max_isa = std::getenv("ONEDNN_MAX_CPU_ISA");
  r += "  cpu        " + dnnl_util::cpu_paths() +
       (max_isa && *max_isa ? " (ONEDNN_MAX_CPU_ISA=" + std::string(max_isa) + ")" : std::string()) + "\n";
#ifdef TRAINRT_HAVE_MPI
  r += "  MPI        " + std::to_string(MPI_VERSION) + "." + std::to_string(MPI_SUBVERSION);
#ifdef OMPI_MAJOR_VERSION
  r += " (Open MPI " + std::to_string(OMPI_MAJOR_VERSION) + "." + std::to_string(OMPI_MINOR_VERSION) + "." +
       std::to_string(OMPI_RELEASE_VERSION) + ")";
#endif
  r += "\n";
#else
  r += "  MPI        not built\n";
#endif
#ifdef TRAINRT_HAVE_CUDA
  r += cuda_version_report();
#else
  r += "  CUDA       not built\n  cuDNN      not built\n  cuBLASLt   not built\n  NCCL       not built\n";
#endif
  return r;
}

}  // namespace trainrt
