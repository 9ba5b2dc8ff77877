# The CUDA steps of the optimizer plugins (included where LAMP_HAVE_CUDA): sgd.so gets
# sgd_cuda.cu, adam.so and adamw.so get adam_cuda.cu, all three optim_cuda.cu. They declare
# hdr.devices cpu|cuda (LAMP_OPTIM_CUDA=1). The device code runs the CPU step's own headers with
# --fmad=false, so the two agree bit for bit. The CUDA runtime is linked statically and its
# symbols kept inside the plugin: the plugin needs no libcudart and no libcuda to load
# (tests/cli/test_optim_cuda_plugins.sh checks with readelf), and runs its CPU step anywhere.
foreach(name sgd adam adamw)
  set(target lamp_optim_${name})
  if(name STREQUAL "sgd")
    set(step ${CMAKE_CURRENT_LIST_DIR}/sgd_cuda.cu)
  else()
    set(step ${CMAKE_CURRENT_LIST_DIR}/adam_cuda.cu)
  endif()
  target_sources(${target} PRIVATE ${CMAKE_CURRENT_LIST_DIR}/optim_cuda.cu ${step})
  target_compile_definitions(${target} PRIVATE LAMP_OPTIM_CUDA=1)
  target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:--fmad=false>)
  target_link_libraries(${target} PRIVATE CUDA::cudart_static)
  target_link_options(${target} PRIVATE -Wl,--exclude-libs,ALL)
  set_target_properties(${target} PROPERTIES CUDA_VISIBILITY_PRESET hidden
                                             CUDA_RUNTIME_LIBRARY Static)
endforeach()
