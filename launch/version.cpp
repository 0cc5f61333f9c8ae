#include <google/protobuf/stubs/common.h>
#include <oneapi/tbb/version.h>
#include <onnx/common/version.h>

#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "launch/commands.h"

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
  r += "  oneTBB     " + std::string(TBB_VERSION_STRING) + "\n";
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
