"""array-api-strict adapter: the standard and nothing else, with several virtual devices.

Passing the suite here proves an encoder uses only the Array API. Its extra devices
(``device1``, ``no_float64``) check that nothing silently lands on the default device and that
encoders cope without float64.
"""

from __future__ import annotations

from typing import Any

from ._base import Backend


class StrictBackend(Backend):
    name = "array_api_strict"
    priority = 30

    def owns(self, x: Any) -> bool:
        import array_api_strict

        return isinstance(x, type(array_api_strict.asarray(0)))

    def namespace(self) -> Any:
        import array_api_strict

        return array_api_strict

    def native(self) -> Any:
        import array_api_strict

        return array_api_strict

    def test_devices(self) -> list[Any]:
        import array_api_strict

        return [array_api_strict.Device("CPU_DEVICE"), array_api_strict.Device("device1"),
                array_api_strict.Device("no_float64")]

    def float_dtypes(self) -> Any:
        import array_api_strict as xp

        return {"float32": xp.float32, "float64": xp.float64}

    def wide_float_dtype(self, device: Any = None) -> Any:
        info = self.namespace().__array_namespace_info__()
        dtypes = info.dtypes(device=device, kind="real floating")
        return dtypes.get("float64", dtypes["float32"])

    def to_numpy(self, x: Any) -> Any:
        import numpy as np

        return np.from_dlpack(x)
