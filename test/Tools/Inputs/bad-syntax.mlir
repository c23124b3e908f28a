muon.model @m { muon.param }
