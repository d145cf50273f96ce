"""stub"""
def write(layout):
    layout.desired_state.mkdir(exist_ok=True)
